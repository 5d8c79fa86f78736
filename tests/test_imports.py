"""The package's import graph, read from the source (imports inside functions included):
no cycles, and the stages (collect, ingest, analyze, render) import one way. Within
analyze, rules and savings import findings (the registry and the helpers rules share), the
analyzer imports rules and findings, efficiency imports peaks; render.report imports
render.pdf, never the other way."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "reporter"

def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = here.split(".")[:len(here.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                deps |= ({f"{target}.{a.name}" for a in node.names} if node.module is None
                         else {target})
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("reporter"):
                deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("reporter")}
        graph[name] = deps
    return {k: {d for d in v if d in graph and d not in (k, "reporter")}
            for k, v in graph.items()}


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_reader_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_cycle():
    graph = _graph()
    assert {"reporter.render.report", "reporter.render.pdf", "reporter.analyze.analyzer",
            "reporter.analyze.rules.waits", "reporter.collect.targets.cnn"} <= set(graph)  # seen
    assert "reporter.analyze.findings" in graph["reporter.analyze.rules.waits"]  # and their imports
    assert _cycles(graph) == []


# What each stage may import (besides itself, the data floor reporter.model and the shared
# modules errors, memory, store and validate): collect and ingest produce Profiles,
# analyze reads them, render reads what analyze made; nothing below imports what is above
# it. The data floor (Profile, Run/Section, Finding/Saving, stats, contention) imports
# nothing of reporter's but itself.
MAY_IMPORT = {
    "model": set(),
    "analyze": set(),
    "ingest": {"analyze"},
    "collect": {"analyze", "ingest"},
    "render": {"analyze"},
}
SHARED = {"reporter.errors", "reporter.memory", "reporter.store", "reporter.validate"}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in MAY_IMPORT else None


def test_the_stages_import_one_way():
    graph = _graph()
    wrong = []
    for module, deps in graph.items():
        stage = _stage(module)
        if stage is None:
            continue
        for dep in deps:
            other = _stage(dep)
            allowed = (other == stage or other in MAY_IMPORT[stage] or
                       (stage != "model" and (dep in SHARED or other == "model")))
            if not allowed:
                wrong.append(f"{module} -> {dep}")
    assert wrong == []


def test_the_shared_modules_import_no_stage_above_analyze():
    graph = _graph()
    for module in SHARED:
        assert {_stage(d) for d in graph[module]} <= {None, "model", "analyze"}, module


def test_the_data_floor_is_the_ground():
    """reporter.model is what every stage speaks: it imports no stage and no shared
    module, and the analyzer's doors take its types."""
    import inspect

    from reporter.analyze import analyzer, efficiency
    from reporter.model.run import Run, Section

    graph = _graph()
    floor = [m for m in graph if _stage(m) == "model"]
    assert {"reporter.model.profile", "reporter.model.run", "reporter.model.finding"} <= set(floor)
    for module in floor:
        assert all(_stage(d) == "model" for d in graph[module]), (module, graph[module])
    hints = {f: inspect.get_annotations(f, eval_str=True) for f in
             (analyzer.analyze_section, analyzer.analyze_run, efficiency.of_section)}
    assert hints[analyzer.analyze_section]["section"] is Section
    assert hints[analyzer.analyze_run]["run"] is Run
    assert hints[efficiency.of_section]["section"] is Section


def test_analysis_computes_from_recorded_data_without_torch():
    """analyze/ never imports torch (device timing lives in collect/): no module of it
    names torch, and analyzing a stored run in a fresh process leaves torch unloaded."""
    import subprocess
    import sys

    for path in (PACKAGE / "analyze").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "torch" for n in names), path.name
    fixture = Path(__file__).resolve().parent / "fixtures" / "runs" / "cpu-transformer"
    code = ("import sys\n"
            "from reporter import store\n"
            "from reporter.analyze.analyzer import analyze_run\n"
            f"analyses = analyze_run(store.load({str(fixture)!r}))\n"
            "assert analyses and analyses[0].findings is not None\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PACKAGE.parent)
    assert out.stdout.strip() == "False", out.stderr


def test_the_command_line_calls_only_the_pipeline():
    """cli.py parses and prints; every piece of work, the stored runs' rows and the ranks
    it starts included, is a function of reporter.pipeline."""
    assert _graph()["reporter.cli"] <= {"reporter.pipeline", "reporter.errors"}


def test_the_rank_protocol_lives_in_one_module():
    """Joining the group, posting a rank's run and gathering them on rank 0 are
    collect/distributed.py's; the pipeline only asks it for a target on every rank."""
    words = ("Peers(", ".post(", ".collect(", "merge(", ".init(", ".finish(", "trace_files(")
    for path in PACKAGE.rglob("*.py"):
        if path.name == "distributed.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert not [w for w in words if f"distributed{w}" in text or
                    (w in text and "from .collect.distributed import" in text)], path


def test_the_views_only_format():
    """render/ takes what the analysis decided as data: from reporter.analyze it imports
    types and constants, never a function (no analyzer, efficiency or reading call while a
    report is formatted); the pipeline hands the views their analyses."""
    calls = []
    for path in (PACKAGE / "render").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and "analyze" in (node.module or ""):
                calls += [f"{path.name}: {a.name}" for a in node.names
                          if not (a.name.isupper() or a.name[:1].isupper())]
    assert calls == []


MAX_LINES = 800


def test_no_module_is_over_800_lines():
    """Every module of the package stays at most MAX_LINES lines (issue #67): a module that
    grows past it is split by what its parts do, its old name re-exporting what others
    import from it."""
    long = sorted(f"{path.relative_to(PACKAGE.parent)}: {n} lines" for path in
                  PACKAGE.rglob("*.py")
                  if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES)
    assert long == []
