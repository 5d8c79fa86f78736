"""The one way text from outside reaches a report: escaped for its context.

Everything reporter reads is untrusted: operator names, the headings and
sentences around a table, file names, every field of a stored run. Such text
reaches Markdown, HTML comments, fenced blocks and Mermaid only through the
functions here, each for one context:

- ``text``: prose in Markdown (a heading, a table cell, a sentence);
- ``code``: an inline code span (operator names), safe inside a pipe table;
- ``fence``: a fenced block (raw logs, Mermaid);
- ``comment``: inside ``<!-- ... -->``;
- ``url``: a relative link target (a chart file beside the report);
- ``mermaid_label``: a quoted label inside a Mermaid chart;
- ``log``: inside a line of a CI job's log (no workflow command; plain text, not Md).

Each returns ``Md``, a ``str`` that is already safe Markdown. The report
templates' Jinja environment passes every printed value through ``finalize``:
``Md`` is printed as it is, anything else is escaped as ``text``. So a value
can only become markup by going through one of these functions.

Every context first makes the text one line (``clean``): control characters,
Unicode line breaks (``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, ``\\x85``,
U+2028, U+2029) and invisible format characters (bidirectional overrides,
zero-width spaces) become U+FFFD, tabs become spaces. Names are shortened for
display (``shorten``); ``--json`` keeps them whole.

Prose (``text``) is also kept from pinging or linking anything on GitHub: an @mention
(a user, ``@org/team``), an e-mail address and a bare URL (``http://``, ``https://``,
``www.``) each get a zero-width joiner (``JOINER``) after their ``@``, ``:`` or
``www``, so that they read the same but GitHub neither notifies anyone nor makes a link.
"""

from __future__ import annotations

import re
from typing import Any, Iterable
from urllib.parse import quote

NAME_WIDTH = 160  # characters of an operator name shown in a report
TEXT_WIDTH = 300  # characters of other text from the input (labels, file names, errors)

# C0 and C1 controls (but tab), Unicode line and paragraph separators, and format
# characters that are invisible or reorder text (soft hyphen, Arabic letter mark,
# Mongolian vowel separator, zero-width and bidirectional marks, word joiners,
# the byte-order mark, interlinear annotations).
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f"
                     "\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]")
_REPLACEMENT = "\ufffd"


class Md(str):
    """Markdown that is safe to print as it is (made by a function of this module)."""

    __slots__ = ()


def clean(value: Any) -> str:
    """One line of plain characters: what could break a line or hide text is replaced."""
    return _UNSAFE.sub(_REPLACEMENT, str(value).replace("\t", " "))


def shorten(value: str, width: int) -> str:
    """At most ``width`` characters: long names keep their start and their end."""
    if len(value) <= width:
        return value
    head = (width - 1) * 2 // 3
    return value[:head] + "…" + value[len(value) - (width - 1 - head):]


# Prose: backslash escapes that both GitHub (CommonMark) and python-markdown undo,
# and entities for what python-markdown has no escape for (<, >, &, |, $, ~).
_TEXT_ESCAPES = {ch: "\\" + ch for ch in "\\`*_[]#"}
_TEXT_ESCAPES.update({"<": "&lt;", ">": "&gt;", "&": "&amp;", "|": "&#124;", "$": "&#36;",
                      "~": "&#126;"})
_TEXT_TABLE = str.maketrans(_TEXT_ESCAPES)

# U+200D: invisible, and neither a word character nor a blank, so that GitHub's mention
# pattern (``@`` then a letter or digit) and its autolinks (``www.``, a scheme then
# ``//``, ``name@domain``) no longer match. Input never holds one (``clean``).
JOINER = "\u200d"
_WWW = re.compile(r"(?i)(www)\.")


def inert(value: str) -> str:
    """``value`` with each @mention, e-mail address and bare URL broken by ``JOINER``."""
    out = value.replace("@", "@" + JOINER).replace("://", ":" + JOINER + "//")
    return _WWW.sub(lambda m: m.group(1) + JOINER + ".", out)


_LEADING_SPACES = re.compile(r"^ {2,}")
_BULLET = re.compile(r"[-+](?= |-|\+|$)")
_ORDERED = re.compile(r"(\d{1,9})([.)])(?= |$)")


def text(value: Any, width: int | None = TEXT_WIDTH) -> Md:
    """Plain text in Markdown prose: shows as the same characters, never as markup.

    Leading spaces become one (at the start of a line, four would make a code block);
    mentions and bare URLs are made inert (``inert``).
    """
    out = _LEADING_SPACES.sub(" ", clean(value))
    if width:
        out = shorten(out, width)
    out = inert(out).translate(_TEXT_TABLE)
    # What would start a list or a rule when the text begins a line (after the one
    # leading space a line may keep).
    lead = " " if out.startswith(" ") else ""
    body = out[len(lead):]
    if _BULLET.match(body):
        body = "\\" + body
    elif m := _ORDERED.match(body):
        body = f"{m.group(1)}\\{m.group(2)}{body[m.end():]}"
    return Md(lead + body)


_TICKS = re.compile(r"`+")
_PIPE = re.compile(r"(\\*)\|")


def code(value: Any, width: int | None = NAME_WIDTH) -> Md:
    """An inline code span holding ``value`` as it is, also inside a pipe table.

    The delimiter is one backtick longer than the longest run inside. A pipe is
    escaped for GitHub's table scanner, which reads ``\\\\`` as an escaped
    backslash: an odd number of backslashes always stands before the pipe.
    """
    out = clean(value)
    if width:
        out = shorten(out, width)
    out = _PIPE.sub(lambda m: m.group(1) + ("\\" if len(m.group(1)) % 2 else "") + "\\|", out)
    out = out or " "  # an empty span is no code span
    longest = max((len(run) for run in _TICKS.findall(out)), default=0)
    ticks = "`" * (longest + 1)
    # CommonMark drops one space at each end when both ends have one: pad to keep them.
    pad = " " if (out[0] == "`" or out[-1] == "`"
                  or (out[0] == " " and out[-1] == " " and out.strip())) else ""
    return Md(f"{ticks}{pad}{out}{pad}{ticks}")


_SPAN = re.compile(r"`([^`]+)`")


def with_code(value: Any) -> Md:
    """Prose written by the templates themselves (a note of terms.j2) that quotes code
    between backticks: each quoted span becomes inline code (``code``), the rest is
    escaped as ``text``. Nothing here becomes other markup, so the filter is safe on any
    text; without it, the backticks of such a note printed escaped (\\`)."""
    out = clean(value)
    parts = _SPAN.split(out)
    said = [code(part, width=None) if i % 2 else (text(part, width=None) if part else "")
            for i, part in enumerate(parts)]
    return Md("".join(said))


def cap_first(value: Any) -> Md:
    """Prose with its first letter capitalised and the rest as it is: Jinja's
    ``capitalize`` lowers the rest ("GPU" read "gpu")."""
    out = finalize(value)
    return Md(out[:1].upper() + out[1:])


def fence(value: Any, info: str = "text") -> Md:
    """A fenced block holding the lines of ``value``; no line inside can close it."""
    lines = [clean(line) for line in str(value).replace("\r\n", "\n").split("\n")]
    body = "\n".join(lines)
    longest = max((len(run) for run in _TICKS.findall(body)), default=0)
    ticks = "`" * max(3, longest + 1)
    return Md(f"{ticks}{info}\n{body}\n{ticks}")


def comment(value: Any) -> Md:
    """Text inside an HTML comment: no ``--`` or ``>`` to end it, one line."""
    out = quote(clean(value), safe=" !\"#$&'()*+,./:;=?@[\\]^_`{|}~-")
    return Md(re.sub("-(?=-)", "%2D", out).replace(">", "%3E"))


def url(value: Any) -> Md:
    """A relative link target: every character outside a plain file name is percent-encoded."""
    return Md(quote(clean(value), safe="/._-~"))


def mermaid_label(value: Any, width: int = 40) -> str:
    """A label inside a double-quoted Mermaid string: one line, no quotes, no markup.

    Mermaid reads ``#name;`` as an entity and ``<...>`` as HTML: both are replaced
    by look-alikes.
    """
    out = shorten(clean(value), width)
    return (out.replace('"', "'").replace("<", "‹").replace(">", "›").replace("#", "＃")
            .replace("`", "'"))


def log_line(line: str) -> str:
    """A line for a CI job's log that GitHub's runner does not read as a workflow
    command: ``::`` after leading blanks (``::set-output``, ``::stop-commands``) gets a
    ``JOINER`` between its colons, and so does the legacy ``##[`` anywhere in the line.
    ``line`` must be one line already (``log`` makes it one)."""
    out = line.replace("##[", "#" + JOINER + "#[")
    rest = out.lstrip()
    if rest.startswith("::"):
        out = out[:len(out) - len(rest)] + ":" + JOINER + rest[1:]
    return out


def log(value: Any, width: int | None = TEXT_WIDTH) -> str:
    """Text from the input inside a message that can reach a CI job's log (a label, a
    target's or a folder's name): one line (``clean``), shortened, no workflow command
    (``log_line``)."""
    out = clean(value)
    return log_line(shorten(out, width) if width else out)


def join(items: Iterable[Any], separator: str = "") -> Md:
    """Jinja's ``join`` for reports: each item escaped as it would be printed alone."""
    return Md(finalize(separator).join(finalize(item) for item in items))


def finalize(value: Any) -> Md:
    """What the report templates print for ``{{ value }}``: Md as it is, else text."""
    if isinstance(value, Md):
        return value
    if value is None:
        return Md("")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Md(str(value))
    return text(value)
