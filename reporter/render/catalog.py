"""Which translations are stale: each language records, per sentence, the hash of the
English it was translated from (``templates/<code>/catalog.json``), as gettext's fuzzy
entries do. A sentence whose English changed since is named by
tests/test_catalog.py, with the English it now reads.

A sentence is a unit a translator words whole: a macro (``{% macro name() %}``) or a block
(``{% block name %}``) of a template, what a finding's template says outside its macros
(its bullet), and each string of a table in ``terms.j2`` or ``targets.j2``
(``rule.copy-heavy``). The English folder is the source.

After translating, record what was translated from::

    .venv/bin/python -m reporter.render.catalog ru      # or zh; --check only reports
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterator

SOURCE = "en"
CATALOG = "catalog.json"
_MACRO = re.compile(r"\{%-?\s*macro\s+(\w+)\s*\(.*?%\}(.*?)\{%-?\s*endmacro\s*-?%\}", re.S)
_BLOCK = re.compile(r"\{%-?\s*block\s+(\w+)\s*-?%\}(.*?)\{%-?\s*endblock(?:\s+\w+)?\s*-?%\}",
                    re.S)
_SET = re.compile(r"\{%-?\s*set\s+(\w+)\s*=\s*(.*?)-?%\}", re.S)
_COMMENT = re.compile(r"\{#.*?#\}", re.S)
_TAG_LINE = re.compile(r"^\s*\{%-?\s*(extends|import|from)\b.*?%\}\s*$", re.M)


def _digest(text: str) -> str:
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()[:16]


def _leaves(prefix: str, value: Any) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(f"{prefix}.{key}", item)
    else:
        yield prefix, str(value)


def _tables(source: str) -> Iterator[tuple[str, str]]:
    """Each string of the ``{% set name = {...} %}`` tables, by its path (a Jinja dict
    literal of strings is a JSON object)."""
    for name, literal in _SET.findall(source):
        try:
            value = json.loads(literal)
        except ValueError:
            yield name, literal  # not plain data: the whole assignment is one sentence
            continue
        yield from _leaves(name, value)


def sentences(folder: Path) -> dict[str, str]:
    """Every sentence of a language folder, by a stable key (``file::macro name``), with
    its text."""
    out: dict[str, str] = {}
    for path in sorted(folder.rglob("*.j2")):
        rel = path.relative_to(folder).as_posix()
        source = _COMMENT.sub("", path.read_text(encoding="utf-8"))
        for name, text in _MACRO.findall(source):
            out[f"{rel}::macro {name}"] = text
        for name, text in _BLOCK.findall(source):
            out[f"{rel}::block {name}"] = text
        for key, text in _tables(source):
            out[f"{rel}::{key}"] = text
        rest = _TAG_LINE.sub("", _SET.sub("", _BLOCK.sub("", _MACRO.sub("", source)))).strip()
        if rest:
            out[f"{rel}::text"] = rest
    return out


def source_hashes(templates: Path) -> dict[str, str]:
    """The English source's hash of each sentence."""
    return {key: _digest(text) for key, text in sentences(templates / SOURCE).items()}


def recorded(templates: Path, code: str) -> dict[str, str]:
    path = templates / code / CATALOG
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in data.get("translated_from", {}).items()}


def stale(templates: Path, code: str) -> list[str]:
    """The sentences of ``code`` whose English changed (or appeared, or went) since they
    were translated: one line each, naming the sentence."""
    now, then = source_hashes(templates), recorded(templates, code)
    out = [f"{key}: the English changed since it was translated" for key in sorted(now)
           if key in then and then[key] != now[key]]
    out += [f"{key}: new in English, not yet translated" for key in sorted(set(now) - set(then))]
    out += [f"{key}: gone from English, still in the catalog" for key in
            sorted(set(then) - set(now))]
    return out


def record(templates: Path, code: str) -> Path:
    """Record that ``code`` is translated from the English as it is now."""
    path = templates / code / CATALOG
    data = {"source": SOURCE,
            "about": "the English each sentence was translated from (reporter.render.catalog)",
            "translated_from": source_hashes(templates)}
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True) + "\n",
                    encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    templates = Path(__file__).resolve().parents[2] / "templates"
    check = "--check" in argv
    codes = [a for a in argv if not a.startswith("-")]
    if not codes:
        print("usage: python -m reporter.render.catalog CODE [CODE ...] [--check]",
              file=sys.stderr)
        return 2
    for code in codes:
        if not (templates / code).is_dir() or code == SOURCE:
            print(f"no translated language {code!r} under {templates}", file=sys.stderr)
            return 2
        if check:
            for line in stale(templates, code):
                print(f"{code}: {line}")
        else:
            print(record(templates, code))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
