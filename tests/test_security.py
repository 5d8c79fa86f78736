"""Untrusted text never becomes markup: no file embedded, no URL fetched.

Every string reporter reads (operator names, the prose around tables, file
names, every field of a stored run) is hostile here. Each test renders through
the real command line, Markdown and PDF, in every language, while a listener
on 127.0.0.1 counts the requests it receives; then it checks that the listener
got none, that the PDF has no attachment, and that the Markdown, parsed as
GitHub would (markdown-it), holds no HTML but the report's own.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import FIXTURES, cli
from markdown_it import MarkdownIt

from reporter.model.profile import Op, Profile
from reporter.render.keytable import format_table
from reporter.render.view import LANGUAGES

pypdf = pytest.importorskip("pypdf")

# Unicode line breaks that str.splitlines() honours, besides "\n".
BREAKS = ["\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
# The only HTML a report writes itself.
OWN_HTML = re.compile(r"<!-- reporter:[^\n]*? -->|<details>|</details>|"
                      r"<summary><b>[^<>]*</b></summary>")


class _Listener:
    """An HTTP server on 127.0.0.1 that records every request it gets."""

    def __init__(self) -> None:
        hits = self.hits = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the standard library's name)
                hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/svg+xml")
                self.end_headers()
                self.wfile.write(b'<svg xmlns="http://www.w3.org/2000/svg"/>')

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener():
    server = _Listener()
    yield server
    server.close()


def hostile_names(url: str) -> list[str]:
    """Names that try every way out of a code span, a table cell, a line or a chart."""
    return [
        '``a``<a rel="attachment" href="file:///etc/passwd">pw-a</a>`` ',
        f'b<link rel="attachment" href="file:///etc/hostname"><img src="{url}/link">',
        f'c` <img src="{url}/tick"> `',
        f'd\\|<img src="{url}/pipe">|`x`',
        f'e<!-- --><img src="{url}/comment">',
        "f$\\undefinedcmd$ and ${{{",
        "g $5 and $6",
        f"h[link]({url}/md-link) ![img]({url}/md-img)",
        "i" + "x" * 9000,  # a long name without spaces
    ]


def _table_text(names: list[str], heading: str) -> str:
    ops = [Op(name=n, calls=3, self_cpu_us=1000.0 * (len(names) - i),
              cpu_total_us=1000.0 * (len(names) - i)) for i, n in enumerate(names)]
    p = Profile(label="x", ops=ops, self_cpu_us=sum(o.self_cpu_us for o in ops))
    return f"{heading}\n\n" + format_table(p, name_width=20000) + "\n"


def _trace(names: list[str]) -> dict:
    events, ts = [], 0
    for i, name in enumerate(names):
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1,
                       "ts": ts, "dur": 1000 + 10 * i, "args": {}})
        ts += 2000
    return {"traceEvents": events}


def check_markdown(md: str, url: str) -> None:
    """The Markdown holds no HTML but the report's own, and no link or image to ``url``."""
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    stack = list(tokens)
    while stack:
        tok = stack.pop()
        stack.extend(tok.children or [])
        if tok.type in ("html_block", "html_inline"):
            rest = OWN_HTML.sub("", tok.content).strip()
            assert not rest, f"raw HTML from the input: {tok.content[:200]!r}"
        if tok.type in ("link_open", "image"):
            target = tok.attrGet("href") or tok.attrGet("src") or ""
            assert not target.startswith(url) and ":" not in target, target


def check_pdf(path: Path) -> None:
    reader = pypdf.PdfReader(str(path))
    assert not reader.attachments, reader.attachments
    raw = path.read_bytes()
    assert b"EmbeddedFile" not in raw and b"/Launch" not in raw and b"/URI" not in raw


def _reports(folder: Path, suffix: str) -> list[Path]:
    return sorted(folder.glob(f"*{suffix}"))


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_hostile_table_embeds_nothing_and_fetches_nothing(tmp_path, listener, lang):
    heading = (f'## Profile <link rel="attachment" href="file:///etc/hostname">'
               f'<img src="{listener.url}/heading"> `x` **y**')
    table = tmp_path / "t.txt"
    table.write_text(_table_text(hostile_names(listener.url), heading), encoding="utf-8")
    out = tmp_path / "out"
    res = cli("analyze", table, "--format", "md,pdf", "--lang", lang, "--out", out)
    assert res.code == 0, res.err
    md = (out / f"t.report.{lang}.md").read_text(encoding="utf-8")
    check_markdown(md, listener.url)
    check_pdf(out / f"t.report.{lang}.pdf")
    assert listener.hits == []
    # The names are in the report as text (shortened when long), not dropped.
    assert "pw-a" in md and "undefinedcmd" in md
    assert len(md) < 40_000


@pytest.mark.parametrize("lang", LANGUAGES)
def test_line_breaks_in_trace_names_never_start_a_line(tmp_path, listener, lang):
    names = [f"op{ch}<img src=\"{listener.url}/{i}\">" for i, ch in enumerate(BREAKS)]
    names.append(f"op\n```\n<img src=\"{listener.url}/fence\">")
    trace = tmp_path / "evil-->x.json"
    trace.write_text(json.dumps(_trace(names)), encoding="utf-8")
    out = tmp_path / "out"
    res = cli("analyze", trace, "--format", "md,pdf", "--lang", lang, "--out", out,
              "--github")
    assert res.code == 0, res.err
    [md_path] = _reports(out, f".{lang}.md")
    md = md_path.read_text(encoding="utf-8")
    check_markdown(md, listener.url)
    assert md.splitlines() == md.split("\n")[:-1]  # "\n" is the only line break left
    assert not any(ch in md for ch in BREAKS)
    [pdf] = _reports(out, f".{lang}.pdf")
    check_pdf(pdf)
    # Mermaid blocks stay closed: every ``` line opens or closes a block of the report.
    fences = [line for line in md.splitlines() if line.startswith("```")]
    assert len(fences) % 2 == 0
    assert listener.hits == []


def _hostile_run(root: Path, url: str, name: str) -> Path:
    src = FIXTURES / "runs" / "cuda-seed001"
    dest = root / name
    shutil.copytree(src, dest)
    path = dest / "run.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    run = doc["run"]
    img = f'<img src="{url}/run">'
    run["id"] = f"id`{img}"
    run["target"]["name"] = 'tgt``<a rel="attachment" href="file:///etc/passwd">p</a>``'
    run["target"]["preset"] = f"pre`{img}"
    run["env"]["device_name"] = f"GPU\u2028{img}"
    run["env"]["torch"] = f"2.0\r{img}"
    run["env"]["cuda"] = f"12 -->{img}"
    run["env"]["driver"] = f"$\\bad$ {img}"
    for s in run["sections"]:
        s["trace"] = f"t`{img}.json.gz"
        s["label"] = f"lbl\x85{img}"
        # The logs print the operators' input shapes as the profiler recorded them.
        for op in s["profile"]["ops_by_shape"][:3]:
            op["input_shapes"] = f"[[1]]\n```\n{img}\n```\n"
        for op in s["profile"]["ops"][:3]:
            op["name"] = f"{op['name']}\u2029{img}"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return dest


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_hostile_stored_run_renders_and_compares_safely(tmp_path, listener, lang):
    root = tmp_path / "runs"
    a = _hostile_run(root, listener.url, "a")
    b = _hostile_run(root, listener.url, "b")
    res = cli("render", a, "--format", "md,pdf", "--lang", lang)
    assert res.code == 0, res.err
    check_markdown((a / f"report.{lang}.md").read_text(encoding="utf-8"), listener.url)
    check_pdf(a / f"report.{lang}.pdf")
    res = cli("render", a, "--lang", lang, "--github", "--max-chars", "0")
    assert res.code == 0, res.err
    check_markdown((a / f"report.{lang}.md").read_text(encoding="utf-8"), listener.url)
    out = tmp_path / "cmp"
    res = cli("compare", a, b, "--format", "md,pdf", "--lang", lang, "--out", out, "--github")
    assert res.code == 0, res.err
    check_markdown((out / f"compare.{lang}.md").read_text(encoding="utf-8"), listener.url)
    check_pdf(out / f"compare.{lang}.pdf")
    assert listener.hits == []


def test_the_pdf_fetcher_refuses_everything_but_the_report_charts(tmp_path, listener):
    from reporter.render.pdf import url_fetcher

    (tmp_path / "report-chart-1-train.en.svg").write_text("<svg/>")
    (tmp_path / "other.svg").write_text("<svg/>")
    fetch = url_fetcher(tmp_path, {"report-chart-1-train.en.svg"})
    ok = fetch((tmp_path / "report-chart-1-train.en.svg").as_uri())
    assert (ok["string"] if isinstance(ok, dict) else ok.read()) == b"<svg/>"
    for bad in [(tmp_path / "other.svg").as_uri(), "file:///etc/passwd",
                f"{listener.url}/x", "data:image/svg+xml,<svg/>",
                (tmp_path / ".." / tmp_path.name / "other.svg").as_uri()]:
        with pytest.raises(ValueError):
            fetch(bad)
    assert listener.hits == []


# Property-based tests of the escaping functions: for any string, what a Markdown
# reader (GitHub's flavour through markdown-it, the PDF's through python-markdown)
# makes of it is that string as text, and nothing else.

from hypothesis import HealthCheck, example, given, settings, strategies as st  # noqa: E402

from reporter.render import markup  # noqa: E402
from reporter.render.pdf import sanitize, to_html  # noqa: E402

GFM = MarkdownIt("commonmark").enable("table")
# Any text, with a bias towards what Markdown and HTML treat specially.
SPECIAL = st.sampled_from(list("`\\|<>&*_[]()#!$~-+=.:;'\" \t\n\r\v\f\x00\x1c\x85") +
                          ["\u2028", "\u2029", "\u202e", "-->", "<img src=x>", "```",
                           "&lt;", "&#124;", "1. ", "<!--", "]]>", "\\|"])
ANY = st.lists(st.one_of(st.text(max_size=5), SPECIAL), max_size=30).map("".join)
PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _inline_children(md: str):
    tokens = GFM.parse(md)
    inline = [t for t in tokens if t.type == "inline"]
    return tokens, inline


def _shown(value: str, width: int) -> str:
    return markup.shorten(markup.clean(value), width)


@PROPERTY
@given(ANY)
def test_text_is_text_anywhere_in_a_line(value):
    # (mentions and bare URLs made inert: a zero-width joiner in each, nothing else)
    expected = markup.inert(re.sub(r"^ {2,}", " ", _shown(value, markup.TEXT_WIDTH)))
    for line in (f"a {markup.text(value)} b", f"{markup.text(value)} b"):
        tokens, inline = _inline_children(line)
        assert [t.type for t in tokens] == ["paragraph_open", "inline", "paragraph_close"]
        children = inline[0].children
        assert {c.type for c in children} <= {"text"}, children
        shown = "".join(c.content for c in children)
        assert shown.strip() == (line.replace(markup.text(value), expected)).strip()


@PROPERTY
@given(ANY)
def test_text_and_code_in_a_table_cell_stay_in_their_cell(value):
    for cell, kind in ((markup.text(value), "text"), (markup.code(value), "code_inline")):
        md = f"| h | g |\n| --- | --- |\n| {cell} | z |\n"
        tokens = GFM.parse(md)
        cells = [t for t in tokens if t.type == "td_open"]
        assert len(cells) == 2, (md, [t.type for t in tokens])
        body = [t for t in tokens if t.type == "inline"][2]
        if kind == "code_inline" or body.children:
            assert {c.type for c in body.children} <= {kind}, body.children
    children = [t for t in GFM.parse(f"| h |\n| --- |\n| {markup.code(value)} |\n")
                if t.type == "inline"][1].children
    assert [c.type for c in children] == ["code_inline"]
    # GitHub drops one backslash before each pipe: an odd run gains one, never less.
    expected = re.sub(r"\\*\|", lambda m: "\\" * (len(m.group()) - 1
                                                  + (len(m.group()) - 1) % 2) + "|",
                      _shown(value, markup.NAME_WIDTH))
    assert children[0].content == (expected if expected.strip() else children[0].content)


@PROPERTY
@given(ANY)
def test_a_fence_holds_every_line_and_closes_once(value):
    tokens = GFM.parse(markup.fence(value) + "\nafter\n")
    assert tokens[0].type == "fence" and tokens[0].info == "text"
    lines = [markup.clean(line) for line in value.replace("\r\n", "\n").split("\n")]
    assert tokens[0].content == "\n".join(lines) + "\n"
    assert [t.type for t in tokens[1:]] == ["paragraph_open", "inline", "paragraph_close"]


@PROPERTY
@given(ANY)
def test_a_comment_cannot_be_closed_from_inside(value):
    md = f"<!-- reporter:{markup.comment(value)} -->\n\nafter\n"
    tokens = GFM.parse(md)
    assert tokens[0].type == "html_block"
    assert tokens[0].content.strip() == md.split("\n\n")[0]
    assert tokens[0].content.count("-->") == 1 and "\n" not in tokens[0].content.strip()


@PROPERTY
@given(ANY)
def test_a_mermaid_label_is_one_quoted_line(value):
    label = markup.mermaid_label(value)
    assert not set(label) & set('"<>#`\n\r') and label == markup.clean(label)


@PROPERTY
@given(ANY)
@example(" 1. ")  # a list marker after the one leading space text keeps (found by hypothesis)
@example(" - x")
def test_the_pdf_html_of_any_text_holds_only_a_report_tags(value):
    md = (f"# {markup.code(value)} {markup.text(value)}\n\n{markup.text(value)}\n\n"
          f"| a |\n| --- |\n| {markup.code(value)} {markup.text(value)} |\n\n"
          f"{markup.fence(value)}\n")
    page = to_html(md, "en", None)
    body = page[page.index("<body>") + 6:page.index("</body>")]
    tags = set(re.findall(r"</?([a-zA-Z0-9]+)", body))
    assert tags <= {"h1", "p", "code", "table", "thead", "tbody", "tr", "th", "td", "pre",
                    "colgroup", "col"}, tags  # (the columns: their widths, render/columns.py)


@PROPERTY
@given(st.text(max_size=200), ANY)
def test_the_sanitizer_keeps_only_allowed_tags_and_attributes(html_text, value):
    out = sanitize(html_text + value + '<img src="http://x/y"><a href="file:///etc/passwd">'
                   '<link rel="attachment" href="file:///e"><img src="/etc/x-chart-1.svg">'
                   '<img src="a-chart-1.svg">')
    for tag, attrs in re.findall(r"<([a-z0-9]+)([^>]*)>", out):
        assert tag in {"h1", "h2", "h3", "h4", "h5", "h6", "p", "ul", "ol", "li", "table",
                       "thead", "tbody", "tr", "th", "td", "code", "pre", "strong", "em",
                       "b", "i", "hr", "br", "blockquote", "div", "img", "details",
                       "summary"}
        assert "href" not in attrs and "rel" not in attrs
        assert tag != "img" or re.fullmatch(r' src="[^":/]+-chart-[^":/]+\.svg"( alt="[^"]*")?',
                                            attrs)


def test_the_sanitizer_keeps_a_report_chart_and_drops_other_images():
    out = sanitize('<p><img alt="c" src="t.report-chart-1-profile.en.svg">'
                   '<img src="/etc/x-chart-1.svg"><img src="http://h/a-chart-1.svg"></p>')
    assert out == '<p><img alt="c" src="t.report-chart-1-profile.en.svg"></p>'


EVIL_TARGET = """
import torch
from torch import nn
from reporter import Target

NAMES = {names!r}


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, x):
        for name in NAMES:
            with torch.profiler.record_function(name):
                x = self.l(x)
        return x


def build(device="cpu", preset="default"):
    return Target(model=M(), batches=[(torch.randn(4, 8),)], batch_size=4,
                  modes=("inference",))
"""


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_target_with_hostile_names_runs_and_reports_safely(tmp_path, listener, lang):
    names = [f"rf{ch}<img src='{listener.url}/run{i}'>" for i, ch in enumerate(BREAKS)]
    # torch writes a name's double quote into its trace unescaped: not in a live run's names
    names += [n.replace('"', "'") for n in hostile_names(listener.url)[:5]]
    (tmp_path / "evil.py").write_text(EVIL_TARGET.format(names=names), encoding="utf-8")
    runs = tmp_path / "runs"
    res = cli("run", "--target", tmp_path / "evil.py:build", "--out", runs, "--quiet",
              "--format", "md,pdf", "--lang", lang, "--github")
    assert res.code == 0, res.err
    [folder] = [p for p in runs.iterdir() if not p.name.startswith(".")]
    check_markdown((folder / f"report.{lang}.md").read_text(encoding="utf-8"), listener.url)
    check_pdf(folder / f"report.{lang}.pdf")
    assert listener.hits == []
