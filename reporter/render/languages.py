"""The languages reports are written in: one table, read from the template folders.

A language is a folder ``templates/<code>/``: its words (the templates) and a
``language.json`` that says how to write in it::

    {"name": "Русский",                  its own name
     "locale": "ru",                     Babel locale: numbers, units, dates, plurals (CLDR)
     "fonts": ["DejaVu Sans"],           font families for the PDF and the charts, in order
     "fontconfig": "ru",                 fc-list :lang=... finds a font that covers it
     "font_package": "fonts-dejavu-core",  what to install when none does
     "units": {"duration-millisecond": "ms"},  a unit written otherwise than CLDR does
     "replace": [["кБ", "КБ"]],          text replaced in formatted units
     "minus": "−"}                       the minus sign, where not the ASCII one

Nothing else in reporter names a language: adding one is adding a folder. Folders are
looked for in ``$REPORTER_TEMPLATES`` (folders separated by ``os.pathsep``), then in the
installed package (or the checkout's ``templates/``); the first folder of a code wins.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from ..errors import BadInput, WorkFailed

CONFIG = "language.json"
_FONT_NAME = re.compile(r"[\w .-]+")  # a family name, safe inside a CSS string


@dataclass(frozen=True)
class Language:
    code: str  # the folder's name, and what --lang takes
    name: str
    locale: str
    fonts: tuple[str, ...]
    fontconfig: str
    font_package: str
    units: Mapping[str, str]
    replace: tuple[tuple[str, str], ...]
    minus: str | None
    folder: Path


def builtin_templates() -> Path:
    """The templates shipped with reporter: the installed package's, else the checkout's
    top-level templates/ (an editable install or a clone)."""
    installed = Path(str(resources.files("reporter").joinpath("templates")))
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[2] / "templates"


def template_roots() -> tuple[Path, ...]:
    extra = os.environ.get("REPORTER_TEMPLATES", "")
    return tuple(Path(p) for p in extra.split(os.pathsep) if p) + (builtin_templates(),)


def languages() -> dict[str, Language]:
    """Every language found, by code, in the order of their folders' names."""
    return _load(template_roots())


def broken() -> dict[str, WorkFailed]:
    """Languages whose language.json cannot be used, by code: the error of each. Only a
    report in one of them fails (with that error); the other languages work."""
    return _load_all(template_roots())[1]


def _load(roots: tuple[Path, ...]) -> dict[str, Language]:
    return _load_all(roots)[0]


@lru_cache(maxsize=8)
def _load_all(roots: tuple[Path, ...]) -> tuple[dict[str, Language], dict[str, WorkFailed]]:
    found: dict[str, Language] = {}
    failed: dict[str, WorkFailed] = {}
    for root in roots:
        if not root.is_dir():
            continue
        for folder in sorted(root.iterdir()):
            if (folder.name not in found and folder.name not in failed
                    and (folder / CONFIG).is_file()):
                try:
                    found[folder.name] = _read(folder)
                except WorkFailed as exc:
                    failed[folder.name] = exc
                except RecursionError:
                    failed[folder.name] = WorkFailed(f"{folder / CONFIG}: nested too deeply",
                                                     error_id="install")
    if not found and failed:
        raise next(iter(failed.values()))
    if not found:
        raise WorkFailed(f"reporter's installation is incomplete: no language folder (with "
                         f"{CONFIG}) in {', '.join(map(str, roots))} (reinstall reporter, or "
                         "set REPORTER_TEMPLATES to a folder of language folders)",
                         error_id="install")
    return dict(sorted(found.items())), failed


def _read(folder: Path) -> Language:
    where = folder / CONFIG
    try:
        data: Any = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise WorkFailed(f"{where}: cannot read it ({exc})", error_id="install") from exc
    if not isinstance(data, dict):
        raise WorkFailed(f"{where}: expected a JSON object", error_id="install")
    missing = [k for k in ("name", "locale", "fonts", "fontconfig", "font_package")
               if k not in data]
    if missing:
        raise WorkFailed(f"{where}: missing {', '.join(missing)}", error_id="install")
    from babel import Locale, UnknownLocaleError

    try:
        Locale.parse(data["locale"])
        units = {str(k): str(v) for k, v in dict(data.get("units", {})).items()}
        replace = tuple((str(a), str(b)) for a, b in data.get("replace", []))
        if not isinstance(data["fonts"], list):
            raise ValueError("fonts: a list of font family names, not "
                             f"{type(data['fonts']).__name__}")
        fonts = tuple(str(f) for f in data["fonts"])
        if not fonts or not all(_FONT_NAME.fullmatch(f) for f in fonts):
            raise ValueError("fonts: a list of font family names (letters, digits, spaces)")
    except (TypeError, ValueError, UnknownLocaleError) as exc:
        raise WorkFailed(f"{where}: {exc}", error_id="install") from exc
    return Language(code=folder.name, name=str(data["name"]), locale=str(data["locale"]),
                    fonts=fonts, fontconfig=str(data["fontconfig"]),
                    font_package=str(data["font_package"]), units=units, replace=replace,
                    minus=data.get("minus"), folder=folder)


def codes() -> tuple[str, ...]:
    return tuple(languages())


def language(code: str) -> Language:
    """The language of ``code``; BadInput when there is none."""
    found = languages()
    if code not in found and code in broken():
        raise broken()[code]
    if code not in found:
        raise BadInput(f"unknown language {code!r}; reports exist in {', '.join(found)}",
                       error_id="bad-lang")
    return found[code]


def all_fonts(first: str) -> list[str]:
    """Font families to try for a report in ``first``: its own, then the others' (an
    operator's name may be in any script)."""
    order = [language(first)] + [lang for code, lang in languages().items() if code != first]
    return list(dict.fromkeys(f for lang in order for f in lang.fonts))


def default_language() -> str:
    """The user's language when reports exist in it, else English."""
    import locale as _locale

    known = languages()
    for var in ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE"):
        for part in os.environ.get(var, "").split(":"):
            code = part.split("_")[0].split(".")[0].lower()
            if code in known:
                return code
    try:
        code = (_locale.getlocale()[0] or "").split("_")[0].lower()
    except ValueError:
        code = ""
    return code if code in known else "en"
