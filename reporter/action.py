"""The GitHub Action's work (``action.yml`` at the repository root calls it, through
``scripts/action.py``), in two steps, so that the code it profiles never has the token:

- ``main()``, the profiling step, which has no token: it reads the action's inputs from
  ``INPUT_*`` variables (action.yml maps them) and the job's facts from ``GITHUB_*``;
  profiles the base and the pull request with ``reporter run`` (or takes stored runs),
  compares each target's pair with ``reporter compare --github`` (which appends the
  comparison to the job summary), and writes the pull-request comment's body
  (``comment.md`` in the output folder). Its exit code is the verdict.
- ``main(["comment"])``, a later step with the token (``$GH_TOKEN``): it creates the
  comment, or updates the one it made before: the comment starts with the hidden marker
  ``<!-- reporter:action:KEY -->``, found through ``gh api --paginate`` among all the pull
  request's comments, and only a comment by the token's own author counts (anyone can
  write the marker). After a failure of the first step, the comment made before says so.
  A token that may not comment (empty, or a fork's read-only one) is a warning, never the
  step's failure.

The comment stays within GitHub's 65,536 characters (``cut``, ``comment_body``). Each
``reporter`` is a child process, as a user would run it, in an environment without the
job's tokens and the action's inputs (``child_env``); what it prints goes to the job's log
line by line, none of them a workflow command (``markup.log_line``): a stored run's data
(a label, a folder's name) cannot set an output or stop the runner reading commands.
``pull_request_target`` is refused unless the workflow opts in: there the token can write,
and the pull request's code would run as the same user as the step that comments.

Exit codes: those of ``reporter compare --fail-if-slower``, kept: 3 a regression, 4 could not
measure (0 instead, with a warning, when ``on-busy`` is ``warn``), 1 a failure while working,
2 bad input. Errors are one line on stderr.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .errors import BadInput, ReporterError, WorkFailed
from .render.markup import log, log_line

ON_BUSY = ("fail", "warn")
DEVICES = ("auto", "cuda", "cpu")
FORMATS = ("md", "pdf")
# What each outcome is called in the step's `result` output, by exit code.
RESULTS = {0: "pass", 3: "regression", 4: "busy"}
# What reporter's children (and so the profiled code) never get in their environment: the
# tokens a job can hold (GitHub's CLI reads GH_TOKEN and GITHUB_TOKEN; the runner sets the
# OIDC and runtime ones), and the runner's command files, through which a child could set
# the environment or PATH of the later step that comments with the token. INPUT_* too.
SECRET_ENV = ("GH_TOKEN", "GITHUB_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN",
              "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_URL",
              "ACTIONS_RUNTIME_TOKEN", "ACTIONS_RUNTIME_URL", "ACTIONS_CACHE_URL",
              "ACTIONS_RESULTS_URL")
RUNNER_FILES = ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT", "GITHUB_STATE")
# The tokens that, when the workflow puts them in the job's environment, the profiled code
# can still read from its parent processes: warned about.
JOB_TOKENS = ("GH_TOKEN", "GITHUB_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN",
              "ACTIONS_ID_TOKEN_REQUEST_TOKEN")
ACTIONS_BOT = "github-actions[bot]"  # who GITHUB_TOKEN's comments are by
_PLAIN = re.compile(r"[^\w.-]")


@dataclass
class Inputs:
    targets: list[str]
    lang: str = "en"
    formats: str = "md,pdf"
    device: str = "auto"
    preset: str = ""
    run_args: list[str] = field(default_factory=list)
    fail_if_slower: float | None = 5.0
    on_busy: str = "fail"
    baseline: str = "base"  # base | none | a path of stored runs
    runs: str = ""  # stored runs of the pull request: no profiling
    comment: bool = True
    comment_key: str = ""
    pull_request: int | None = None
    out_dir: Path = Path("reporter")
    working_directory: Path = Path(".")
    artifact_name: str = ""  # named in the comment when it is cut


def _env(name: str, default: str = "") -> str:
    return os.environ.get("INPUT_" + name.upper().replace("-", "_"), default).strip()


def _bool(name: str, default: str) -> bool:
    value = _env(name, default).lower()
    if value not in ("true", "false"):
        raise BadInput(f"input {name}: {value!r} is neither true nor false", error_id="action")
    return value == "true"


def read_inputs() -> Inputs:
    """The action's inputs, checked: a bad one is BadInput before any work."""
    from .render.languages import codes

    if (os.environ.get("GITHUB_EVENT_NAME") == "pull_request_target"
            and not _bool("allow-pull-request-target", "false")):
        raise BadInput("this workflow runs on pull_request_target, whose token can write to "
                       "the repository: the pull request's code, checked out and profiled "
                       "here, would run with it, as the same user that then posts the "
                       "comment; run the action on pull_request (docs/ci.md shows how a "
                       "second workflow comments on a fork's pull request), or set "
                       "allow-pull-request-target: true if this job checks out only "
                       "trusted code", error_id="action")
    targets = _env("targets").replace(",", " ").split()
    runs = _env("runs")
    if not targets and not runs:
        raise BadInput("input targets: name at least one target (a built-in name or "
                       "file.py:function), or give stored runs in input runs",
                       error_id="action")
    lang = _env("lang", "en")
    if lang not in codes():
        raise BadInput(f"input lang: unknown language {lang!r}; reports exist in "
                       f"{', '.join(codes())}", error_id="action")
    formats = _env("formats", "md,pdf").replace(" ", "")
    if not formats or not set(formats.split(",")) <= set(FORMATS) or "md" not in formats.split(","):
        raise BadInput(f"input formats: {formats!r}; give md or md,pdf (the comment is the "
                       "Markdown)", error_id="action")
    device = _env("device", "auto")
    if device not in DEVICES:
        raise BadInput(f"input device: {device!r}; one of {', '.join(DEVICES)}",
                       error_id="action")
    gate = _env("fail-if-slower", "5")
    fail_if_slower: float | None = None
    if gate:
        try:
            fail_if_slower = float(gate)
        except ValueError:
            fail_if_slower = -1.0
        if not 0 <= fail_if_slower < 100:
            raise BadInput(f"input fail-if-slower: {gate!r}; a percentage from 0 to 100, or "
                           "empty for no gate", error_id="action")
    on_busy = _env("on-busy", "fail")
    if on_busy not in ON_BUSY:
        raise BadInput(f"input on-busy: {on_busy!r}; fail or warn", error_id="action")
    number = _pull_request()
    try:
        run_args = shlex.split(_env("run-args"))
    except ValueError as exc:
        raise BadInput(f"input run-args: {exc}", error_id="action") from None
    return Inputs(
        targets=targets, lang=lang, formats=formats, device=device, preset=_env("preset"),
        run_args=run_args, fail_if_slower=fail_if_slower, on_busy=on_busy,
        baseline=_env("baseline", "base"), runs=runs, comment=_bool("comment", "true"),
        comment_key=_env("comment-key"), pull_request=number,
        out_dir=Path(_env("out-dir") or Path(os.environ.get("RUNNER_TEMP", ".")) / "reporter"),
        working_directory=Path(_env("working-directory", ".")),
        artifact_name=_env("artifact-name"))


def _pull_request() -> int | None:
    number = _env("pull-request") or _event_pull_request()
    if number and not number.isdigit():
        raise BadInput(f"input pull-request: {number!r} is not a pull request's number",
                       error_id="action")
    return int(number) if number else None


def read_comment_inputs() -> Inputs:
    """The inputs of the step that comments (those it is given: the comment's, the
    language), checked."""
    from .render.languages import codes

    lang = _env("lang", "en")
    if lang not in codes():
        raise BadInput(f"input lang: unknown language {lang!r}", error_id="action")
    return Inputs(targets=[], lang=lang, comment=_bool("comment", "true"),
                  comment_key=_env("comment-key"), pull_request=_pull_request())


def _event() -> dict[str, Any]:
    path = os.environ.get("GITHUB_EVENT_PATH")
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"$GITHUB_EVENT_PATH ({path}) cannot be read as JSON: {exc}",
                       error_id="action") from None
    return data if isinstance(data, dict) else {}


def _event_pull_request() -> str:
    pr = _event().get("pull_request")
    number = pr.get("number") if isinstance(pr, dict) else None
    return str(number) if isinstance(number, int) else ""


def _base_sha() -> str:
    pr = _event().get("pull_request")
    base = pr.get("base") if isinstance(pr, dict) else None
    sha = base.get("sha") if isinstance(base, dict) else None
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{7,64}", sha):
        raise BadInput("baseline base: this event has no pull request's base commit; run the "
                       "action on pull_request, or give baseline a folder of stored runs",
                       error_id="action")
    return sha


def marker(key: str) -> str:
    from .render.markup import comment

    return f"<!-- reporter:action:{comment(key)} -->"


def comment_key(inputs: Inputs) -> str:
    """One comment per workflow and job, unless the input names another key."""
    return inputs.comment_key or (f"{os.environ.get('GITHUB_WORKFLOW', 'reporter')}/"
                                  f"{os.environ.get('GITHUB_JOB', 'profile')}")


# --- running reporter ---------------------------------------------------------------

# ``python -m reporter`` in the user's checkout would import a ``reporter/`` folder of
# theirs: the working directory comes first on sys.path. Take it off (a target's own
# imports still find it: collect/target.py adds the working directory when it loads one).
_LAUNCH = ("import runpy, sys\n"
           "if not getattr(sys.flags, 'safe_path', False):\n"
           "    del sys.path[0]\n"
           "runpy.run_module('reporter', run_name='__main__', alter_sys=True)\n")


def child_env(summary: bool = True) -> dict[str, str]:
    """The environment of reporter's children: the step's, without the tokens, the
    runner's command files and the action's inputs (``SECRET_ENV``, ``RUNNER_FILES``,
    ``INPUT_*``); without the job summary's file either unless ``summary``."""
    drop = {*SECRET_ENV, *RUNNER_FILES, *(() if summary else ("GITHUB_STEP_SUMMARY",))}
    return {k: v for k, v in os.environ.items()
            if k not in drop and not k.startswith("INPUT_")}


def reporter(args: Sequence[str], cwd: Path | None = None) -> int:
    """``reporter ARGS`` in a child process with this interpreter; its exit code."""
    return _reporter(args, cwd)[0]


def _reporter(args: Sequence[str], cwd: Path | None = None, keep_errors: bool = False
              ) -> tuple[int, str]:
    """``reporter ARGS``: its exit code and, with ``keep_errors``, its stderr (held back
    from the log: the caller decides). What it prints reaches the log line by line, each
    made unable to be a workflow command (``markup.log_line``): it can hold a stored run's
    data, and ``reporter run`` whatever the profiled code prints."""
    cmd = [sys.executable, "-c", _LAUNCH, *args]
    say_line("reporter-action: " + log(shlex.join(["reporter", *args]), width=None),
             sys.stderr)
    proc = subprocess.Popen(cmd, cwd=cwd, env=child_env(summary=args[0] != "run"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, encoding="utf-8",
                            errors="replace")
    kept: list[str] = []
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, sys.stdout, None)),
             threading.Thread(target=_pump, args=(proc.stderr, sys.stderr,
                                                  kept if keep_errors else None))]
    for t in pumps:
        t.start()
    for t in pumps:
        t.join()
    return proc.wait(), "".join(kept)


def _pump(stream: Any, to: Any, keep: list[str] | None) -> None:
    """Each line of a child's ``stream`` to ``to`` (or into ``keep``), defused."""
    for line in stream:
        if keep is not None:
            keep.append(log_line(line.rstrip("\n")) + "\n")
        else:
            say_line(log_line(line.rstrip("\n")), to)
    stream.close()


def say_line(line: str, to: Any = None) -> None:
    """One line to the log (stderr unless ``to``), written whole."""
    stream = to or sys.stderr
    stream.write(line + "\n")
    stream.flush()


def annotate(kind: str, message: str) -> None:
    """A workflow command of the action's own (``::warning``, ``::error``) on stdout: its
    message one line, escaped as GitHub's toolkit escapes a command's data."""
    data = log(message, width=None).replace("%", "%25")
    say_line(f"::{kind} title=reporter::{data}", sys.stdout)


def _checked(code: int, what: str) -> None:
    if code != 0:
        raise _Exit(code, f"{what} failed (exit code {code}); its error is above")


class _Exit(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def profile(inputs: Inputs, out: Path, cwd: Path) -> None:
    """``reporter run`` of the targets into ``out``. Its reports go into the artifact whole
    (``--max-chars 0``): what the comment holds is rendered, and fitted, afterwards."""
    args = ["run", "--quiet", "--out", str(out), "--lang", inputs.lang, "--format",
            inputs.formats, "--device", inputs.device, "--max-chars", "0"]
    for t in inputs.targets:
        args += ["--target", t]
    if inputs.preset:
        args += ["--preset", inputs.preset]
    _checked(reporter(args + inputs.run_args, cwd), "reporter run")


def _git(*args: str, cwd: Path) -> str:
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no message"])[-1]
        raise WorkFailed(f"git {' '.join(args)}: {last}", error_id="action")
    return res.stdout.strip()


def profile_base(inputs: Inputs, out: Path) -> None:
    """Profile the pull request's base commit, checked out in a worktree beside the job's
    repository, so that a target file of the repository is the base's."""
    sha = _base_sha()
    if not inputs.targets:
        raise BadInput("baseline base: name the targets to profile in input targets",
                       error_id="action")
    work = inputs.working_directory.resolve()
    try:
        top = Path(_git("rev-parse", "--show-toplevel", cwd=work))
    except WorkFailed:
        raise BadInput(f"baseline base: {work} is not in a git repository; check it out "
                       "first (actions/checkout)", error_id="action") from None
    inside = _git("rev-parse", "--show-prefix", cwd=work)  # working-directory in the repo
    if subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=top,
                      capture_output=True).returncode != 0:
        _git("fetch", "--no-tags", "--depth=1", "origin", sha, cwd=top)
    scratch = Path(tempfile.mkdtemp(prefix="reporter-base-", dir=os.environ.get("RUNNER_TEMP")))
    tree = scratch / "base"
    _git("worktree", "add", "--detach", str(tree), sha, cwd=top)
    try:
        profile(inputs, out, tree / inside)
    finally:
        _git("worktree", "remove", "--force", str(tree), cwd=top)


def stored_runs(path: Path) -> list[tuple[Path, str]]:
    """(folder, target) of the runs at ``path``: a run folder, or a folder of runs."""
    from .store import RUN_FILE, list_runs

    if (path / RUN_FILE).is_file():
        path, only = path.parent, path.name
    else:
        only = None
    if not path.is_dir():
        raise BadInput(f"{path}: no such folder of stored runs", error_id="action")
    rows = [(folder, info) for folder, info in list_runs(path)
            if only is None or folder.name == only]
    bad = [f"{log(folder.name)} ({log(info['error'])})" for folder, info in rows
           if "error" in info]
    if bad:
        raise BadInput(f"unreadable stored runs: {'; '.join(bad)}", error_id="action")
    if not rows:
        raise BadInput(f"{path}: no stored run here (a folder holding run.json, or "
                       "folders of them)", error_id="action")
    return [(folder, str(info["target"])) for folder, info in rows]


def pairs(base: list[tuple[Path, str]], new: list[tuple[Path, str]]) -> list[tuple[Path, Path]]:
    """Each new run with the base run of its target (the latest one); one run on each side
    pair whatever their targets."""
    if len(base) == 1 and len(new) == 1:
        return [(base[0][0], new[0][0])]
    by_target = {target: folder for folder, target in base}  # oldest first: the latest wins
    missing = [target for _, target in new if target not in by_target]
    if missing:
        raise BadInput(f"the baseline has no run of {', '.join(map(log, missing))}",
                       error_id="action")
    return [(by_target[target], folder) for folder, target in new]


def verdict(codes: list[int]) -> int:
    """One exit code for several comparisons: a failure to work first, then a regression,
    then a comparison the machine's other work spoiled."""
    for code in codes:
        if code not in (0, 3, 4):
            return code
    return 3 if 3 in codes else 4 if 4 in codes else 0


# --- the comment --------------------------------------------------------------------

def gh(*args: str, payload: dict[str, Any] | None = None) -> str:
    """``gh ARGS`` (the token is $GH_TOKEN); a JSON payload goes in through --input."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["gh", *args]
        if payload is not None:
            body = Path(tmp) / "payload.json"
            body.write_text(json.dumps(payload), encoding="utf-8")
            cmd += ["--input", str(body)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True)
        except FileNotFoundError:
            raise WorkFailed("gh (the GitHub CLI) is not on PATH; GitHub's runners have it",
                             error_id="action") from None
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no message"])[-1]
        raise WorkFailed(f"gh {' '.join(args[:3])}: {last}", error_id="action")
    return res.stdout


def _json_values(text: str) -> list[Any]:
    """The JSON values of ``gh api --paginate``: one per page, one after another."""
    decoder, values, at = json.JSONDecoder(), [], 0
    text = text.strip()
    while at < len(text):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
        while at < len(text) and text[at].isspace():
            at += 1
    return values


def token_author() -> str:
    """Whose comments the token writes: the login of a user's token (``gh api user``), or
    GitHub Actions' bot for GITHUB_TOKEN, which may not read /user (HTTP 403)."""
    try:
        me = _one(gh("api", "user"))
    except WorkFailed as exc:
        if "HTTP 403" in str(exc) or "not accessible by integration" in str(exc):
            return ACTIONS_BOT
        raise
    login = me.get("login")
    if not isinstance(login, str) or not login:
        raise WorkFailed("gh api user: GitHub's answer names no login", error_id="action")
    return login


def _by(comment: dict[str, Any], login: str) -> bool:
    user = comment.get("user")
    return (isinstance(user, dict) and user.get("login") == login
            and (login != ACTIONS_BOT or user.get("type") == "Bot"))


def find_comment(repo: str, number: int, head: str) -> dict[str, Any] | None:
    """The pull request's comment that starts with ``head`` and that the token's own
    author wrote, among all its comments (every page of them: a long discussion has more
    than one). The marker is public: anyone can start a comment with it, and such a
    comment is someone else's, never updated."""
    listing = gh("api", f"repos/{repo}/issues/{number}/comments?per_page=100", "--paginate")
    try:
        pages = _json_values(listing)
    except ValueError:
        raise WorkFailed("gh api: the pull request's comments are not JSON",
                         error_id="action") from None
    marked = [c for page in pages for c in (page if isinstance(page, list) else [])
              if isinstance(c, dict) and str(c.get("body", "")).lstrip().startswith(head)]
    if not marked:
        return None
    author = token_author()  # asked only when a comment carries the marker
    return next((c for c in marked if _by(c, author)), None)


def post_comment(repo: str, number: int, head: str, body: str,
                 create: bool = True) -> dict[str, Any]:
    """Update the pull request's comment that starts with ``head``, or create it (unless
    ``create`` is false: then nothing, and an empty answer)."""
    found = find_comment(repo, number, head)
    if found is not None:
        out = gh("api", "-X", "PATCH", f"repos/{repo}/issues/comments/{found['id']}",
                 payload={"body": body})
        return {"id": found["id"], **_one(out)}
    if not create:
        return {}
    return _one(gh("api", "-X", "POST", f"repos/{repo}/issues/{number}/comments",
                   payload={"body": body}))


def _one(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# --- the whole step -----------------------------------------------------------------

def set_outputs(**values: Any) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        for key, value in values.items():
            f.write(f"{key}={' '.join(str(value).split())}\n")


def run(inputs: Inputs, say: Callable[[str], None]) -> int:
    """The profiling step: profile, compare, write the comment's body; the verdict."""
    held = [name for name in JOB_TOKENS if os.environ.get(name)]
    if held:  # the action gives them to no child, but a child can read its parents' env
        annotate("warning", f"{', '.join(held)} in this step's environment (the workflow's "
                 "or the job's env, or permissions: id-token: write): reporter keeps them "
                 "from the profiled code's own environment, but that code runs as the same "
                 "user and can read its parent processes'; give a token only to the steps "
                 "that need it")
    out = inputs.out_dir.resolve()
    if out.exists() and any(out.iterdir()):
        raise BadInput(f"out-dir {log(out)} is not empty: give the action a folder of its "
                       "own", error_id="action")
    out.mkdir(parents=True, exist_ok=True)
    set_outputs(**{"out-dir": out})
    return _work(inputs, out, marker(comment_key(inputs)), say)


def _work(inputs: Inputs, out: Path, head: str, say: Callable[[str], None]) -> int:
    from .render.report import GITHUB_COMMENT_LIMIT

    def share(n: int) -> int:
        """Each of n reports' share of one comment, less the marker line and blank lines."""
        return (GITHUB_COMMENT_LIMIT - len(head) - 2 * n - 16) // max(1, n)

    compare = inputs.baseline != "none"
    if compare and inputs.baseline == "base":
        profile_base(inputs, out / "base")
    if inputs.runs:
        new = stored_runs(Path(inputs.runs))
    else:
        profile(inputs, out / "new", inputs.working_directory)
        new = stored_runs(out / "new")
    reports: list[Path] = []
    codes: list[int] = []
    if compare:
        base = stored_runs(out / "base" if inputs.baseline == "base" else Path(inputs.baseline))
        for i, (b, nw) in enumerate(pairs(base, new), 1):
            # The folder's name is a stored run's (data): only its plain characters.
            dest = out / "compare" / f"{i}-{_PLAIN.sub('_', nw.name)[:80]}"
            args = ["compare", str(b), str(nw), "--github", "--lang", inputs.lang, "--format",
                    inputs.formats, "--out", str(dest), "--max-chars", str(share(len(new)))]
            if inputs.fail_if_slower is not None:
                args += ["--fail-if-slower", f"{inputs.fail_if_slower:g}"]
            code = reporter(args)
            if code not in (0, 3, 4):
                raise _Exit(code, f"reporter compare failed (exit code {code}); its error is "
                                  "above")
            codes.append(code)
            reports.append(dest / f"compare.{inputs.lang}.md")
    else:  # no baseline: each run's report, rendered for GitHub (and the job summary)
        for folder, _ in new:
            render_for_comment(folder, inputs.lang, share(len(new)), say)
            reports.append(folder / f"report.{inputs.lang}.md")
    code = verdict(codes)
    body = comment_body(head, [p.read_text(encoding="utf-8") for p in reports],
                        cut_note(inputs.lang, inputs.artifact_name))
    (out / "comment.md").write_text(body, encoding="utf-8")  # the next step posts it
    set_outputs(result=RESULTS.get(code, "error"), **{"exit-code": code,
                                                     "comment-body": out / "comment.md"})
    if code == 4:
        why = ("could not measure: other work on the runner disturbed the runs; "
               "the comparison is inconclusive, not a pass (re-run the job)")
        if inputs.on_busy == "warn":
            annotate("warning", why)
            return 0
        annotate("error", why)
    elif code == 3:
        annotate("error", f"throughput dropped more than {inputs.fail_if_slower:g}% beyond "
                 "the measurement's noise")
    return code


def render_for_comment(folder: Path, lang: str, limit: int, say: Callable[[str], None]
                       ) -> None:
    """``reporter render FOLDER --github``, its logs shortened to ``limit`` characters. A
    report longer than that even without its logs is rendered whole instead (the job
    summary gets it so), and the comment cuts it."""
    args = ["render", str(folder), "--github", "--lang", lang, "--max-chars"]
    code, errors = _reporter([*args, str(limit)], keep_errors=True)
    if code != 0 and "[too-long]" in errors:
        say(f"{log(folder.name)}: its report is longer than its share of the comment "
            f"({limit:,} characters) even without its logs: the comment holds it cut, the "
            "job summary whole")
        code, errors = _reporter([*args, "0"])
    else:
        sys.stderr.write(errors)  # its lines, defused by _reporter
    _checked(code, "reporter render")


# --- fitting the comment into GitHub's limit -----------------------------------------

def cut_note(lang: str, artifact: str) -> str:
    """The line that ends a report the comment had to cut, in the report's language (its
    second sentence brings its own space, or none: zh)."""
    from .render.markup import code
    from .render.report import GITHUB_COMMENT_LIMIT, terms
    from .render.view import Fmt

    words = terms(lang).comment_cut
    where = (words["artifact"].format(artifact=code(artifact, width=None)) if artifact
             else words["summary"])
    return words["cut"].format(limit=Fmt(lang).int(GITHUB_COMMENT_LIMIT)) + where


def cut(text: str, limit: int, note: str) -> str:
    """``text`` in at most ``limit`` characters: whole when it fits; else its first whole
    lines, never half a code block (a Mermaid chart, a table's fence), any ``<details>``
    left open closed, then ``note``."""
    if len(text) <= limit:
        return text
    room = limit - len(note) - 3  # the blank line before the note, its end of line
    close = len("</details>\n")
    kept: list[str] = []
    size, details = 0, 0
    fence, fence_at, details_at = "", 0, 0  # the open code block: its mark, where it began
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        mark = re.match(r"`{3,}|~{3,}", stripped)
        opened = 0 if fence or mark else stripped.count("<details") - stripped.count("</details>")
        if size + len(line) + close * max(0, details + opened) + 1 > room:
            break
        kept.append(line)
        size += len(line)
        details = max(0, details + opened)
        if fence:
            if mark and stripped == mark[0] and mark[0][0] == fence[0] \
                    and len(mark[0]) >= len(fence):
                fence = ""
        elif mark:
            fence, fence_at, details_at = mark[0], len(kept) - 1, details
    if fence:  # cut inside a code block: leave it out whole
        kept, details = kept[:fence_at], details_at
    body = "".join(kept).rstrip("\n")
    tail = "\n\n" + "</details>\n" * details if details else "\n"
    result = (body + tail if body else "") + "\n" + note + "\n"
    return result if len(result) <= limit else (note + "\n")[:limit]


def comment_body(head: str, reports: list[str], note: str) -> str:
    """The comment: the marker line, then the reports, within GitHub's limit. When they do
    not all fit, the short ones stay whole and the long ones are cut, each to an equal
    share of what the others leave."""
    from .render.report import GITHUB_COMMENT_LIMIT

    left = GITHUB_COMMENT_LIMIT - len(head) - 1 - 2 * max(0, len(reports) - 1)
    fitted = list(reports)
    order = sorted(range(len(reports)), key=lambda i: len(reports[i]))
    for k, i in enumerate(order):
        fitted[i] = cut(reports[i], max(0, left // (len(reports) - k)), note)
        left -= len(fitted[i])
    return head + "\n" + "\n\n".join(fitted)


def comment_step(say: Callable[[str], None]) -> int:
    """The step that comments, with the token, after the profiling step (action.yml runs
    it whenever that step made its output folder, ``$REPORTER_OUT_DIR``): it posts the
    body that step wrote, or, when that step failed (``$REPORTER_EXIT_CODE``, its exit
    code), says so in the comment made before. A comment GitHub refuses is a warning,
    never the job's failure: the profiling step's exit code is the verdict."""
    inputs = read_comment_inputs()
    if not inputs.comment:
        return 0
    head = marker(comment_key(inputs))
    code = os.environ.get("REPORTER_EXIT_CODE", "").strip()
    if code in ("0", "3", "4"):
        body = _written_body(Path(os.environ.get("REPORTER_OUT_DIR", "")) / "comment.md", head)
        if body is not None:
            _comment(inputs, head, body, say)
    elif code.isdigit():
        _comment_failed(inputs, head, int(code), say)
    else:
        annotate("warning", "no comment: the profiling step ended without an exit code "
                 "(cancelled or killed); an earlier comment still shows an earlier commit's "
                 "report")
    return 0


def _written_body(path: Path, head: str) -> str | None:
    """The comment's body the profiling step wrote, or None (and a warning) when it is
    not one: a file that is not there, or not regular, too long, or without the marker."""
    from .render.report import GITHUB_COMMENT_LIMIT

    body = None
    if path.is_file():
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                body = f.read(GITHUB_COMMENT_LIMIT + 1)
        except OSError:
            body = None
    if body is None or len(body) > GITHUB_COMMENT_LIMIT or not body.startswith(head + "\n"):
        annotate("warning", f"no comment: {path} is not the comment's body the profiling "
                 "step writes; the report is in the job summary")
        return None
    return body


def _comment(inputs: Inputs, head: str, body: str, say: Callable[[str], None]) -> None:
    if not inputs.comment:
        return
    if inputs.pull_request is None:
        say("no pull request in this event (and no input pull-request): no comment")
        return
    repo = os.environ.get("GITHUB_REPOSITORY", "")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        raise BadInput(f"$GITHUB_REPOSITORY is {repo!r}, not OWNER/NAME", error_id="action")
    # Not commenting is a warning, never the step's failure: the gate still decides it,
    # and the job summary and the artifact hold the report.
    if not os.environ.get("GH_TOKEN"):
        annotate("warning", "no comment: the input token is empty (a workflow's secrets are "
                 "empty on a pull request from a fork); the report is in the job summary")
        return
    try:
        made = post_comment(repo, inputs.pull_request, head, body)
    except WorkFailed as exc:
        why = str(exc)
        if "HTTP 403" in why or "not accessible by integration" in why:
            why = ("the token may not write to this pull request (a pull request from a "
                   "fork gets a read-only token; docs/ci.md shows how a second workflow "
                   f"comments for it): {why}")
        annotate("warning", f"no comment: {why}; the report is in the job summary")
        return
    set_outputs(**{"comment-id": made.get("id", ""), "comment-url": made.get("html_url", "")})
    say(f"comment {made.get('id')}: {log(made.get('html_url', ''))}")


def _head_sha() -> str:
    pr = _event().get("pull_request")
    head = pr.get("head") if isinstance(pr, dict) else None
    sha = head.get("sha") if isinstance(head, dict) else None
    return sha if isinstance(sha, str) else os.environ.get("GITHUB_SHA", "")


def _comment_failed(inputs: Inputs, head: str, code: int, say: Callable[[str], None]) -> None:
    """After a failure, the action's comment, when there is one, says so instead of
    showing an earlier commit's figures as if they were this one's. It creates none, and
    never fails: the failure itself is the profiling step's."""
    repo = os.environ.get("GITHUB_REPOSITORY", "")
    if (not inputs.comment or inputs.pull_request is None or not os.environ.get("GH_TOKEN")
            or not re.fullmatch(r"[\w.-]+/[\w.-]+", repo)):
        return
    from .render.markup import code as code_span
    from .render.report import terms
    from .render.view import Fmt

    try:
        sha = _head_sha()
        words = terms(inputs.lang).comment_failed
        text = words.format(commit=code_span(sha[:12] or "HEAD", width=None),
                            code=Fmt(inputs.lang).int(code))
        made = post_comment(repo, inputs.pull_request, head, head + "\n" + text + "\n",
                            create=False)
    except (ReporterError, OSError) as exc:
        annotate("warning", f"the comment still shows an earlier commit's report: {exc}")
        return
    if made:
        set_outputs(**{"comment-id": made.get("id", ""),
                       "comment-url": made.get("html_url", "")})
        say(f"comment {made.get('id')} says that this run failed: "
            f"{log(made.get('html_url', ''))}")


def main(argv: Sequence[str] | None = None) -> int:
    """The profiling step (no arguments) or the step that comments (``comment``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in ([], ["comment"]):
        print("usage: python -m reporter.action [comment] (its inputs come from INPUT_* "
              "variables; see action.yml)", file=sys.stderr)
        return 2

    def say(message: str) -> None:
        say_line(f"reporter-action: {message}")

    try:
        return comment_step(say) if args else run(read_inputs(), say)
    except ReporterError as exc:
        say_line(log_line(exc.one_line()))
        code = exc.exit_code
    except _Exit as exc:
        say(str(exc))
        code = exc.code
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        say_line(log(f"reporter: error [io]: {exc.strerror or exc}{where}", width=None))
        code = 1
    if not args:  # the profiling step's outputs say what happened
        try:
            set_outputs(result="error", **{"exit-code": code})
        except OSError:
            pass
    return code


if __name__ == "__main__":
    sys.exit(main())
