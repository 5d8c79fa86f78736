"""Check what was loaded from a file against the dataclasses' own annotations.

A stored run.json is input like any other: it may be corrupted, hand-edited or
crafted. ``check(obj)`` walks a dataclass tree (Run, Section, Profile, Op, ...)
and raises ``ValueError`` naming the first field whose value does not have the
annotated type: strings are strings, integers are not booleans, numbers are
finite. The store turns that into one line and exit code 2.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import lru_cache
from typing import Any


# No quantity in a run comes near this (1e30 FLOPs, bytes or microseconds); a number
# beyond it is a corrupted or crafted run, refused rather than carried into every sum.
MAX_NUMBER = 1e30


def well_formed(text: str) -> str:
    """``text`` with every lone surrogate (a JSON "\\ud800", a file name that is not UTF-8)
    replaced by U+FFFD: such a string cannot be written as UTF-8, so it would fail every
    report, ``--json`` and ``reporter list`` partway through."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def scrub(obj: Any) -> Any:
    """Replace lone surrogates in every string of a tree of dataclasses, lists and dicts,
    in place where it can (returns the object, or the fixed string)."""
    if isinstance(obj, str):
        return well_formed(obj)
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            if isinstance(item, (str, list, dict)) or dataclasses.is_dataclass(item):
                obj[i] = scrub(item)
    elif isinstance(obj, dict):
        for key in list(obj):
            item = obj[key]
            fixed_key = well_formed(key) if isinstance(key, str) else key
            if fixed_key is not key:
                del obj[key]
            if isinstance(item, (str, list, dict)) or dataclasses.is_dataclass(item):
                item = scrub(item)
            obj[fixed_key] = item
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            item = getattr(obj, f.name)
            if isinstance(item, (str, list, dict)) or dataclasses.is_dataclass(item):
                setattr(obj, f.name, scrub(item))
    return obj


def _hints(cls: type) -> dict[str, Any]:
    return _cached_hints(cls)


@lru_cache(maxsize=None)
def _cached_hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check(obj: Any, where: str) -> None:
    """Raise ValueError when a field of the dataclass tree ``obj`` has the wrong type."""
    for f in dataclasses.fields(obj):
        check_value(getattr(obj, f.name), _hints(type(obj))[f.name], f"{where}.{f.name}")


def check_value(value: Any, hint: Any, where: str) -> None:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in args:
            try:
                check_value(value, option, where)
                return
            except ValueError as exc:
                if option is not type(None):  # "expected null" says nothing of a value
                    errors.append(exc)
        raise errors[-1] if errors else ValueError(f"{where}: expected null")
    if hint is type(None):
        if value is not None:
            raise ValueError(f"{where}: expected null, got {_describe(value)}")
        return
    if hint is float:
        if (type(value) not in (int, float) or not math.isfinite(value)
                or abs(value) > MAX_NUMBER):
            raise ValueError(f"{where}: expected a finite number of at most {MAX_NUMBER:g}, "
                             f"got {_describe(value)}")
        return
    if hint is int:
        if type(value) is not int or abs(value) > MAX_NUMBER:
            raise ValueError(f"{where}: expected an integer of at most {MAX_NUMBER:g}, got "
                             f"{_describe(value)}")
        return
    if hint in (str, bool):
        if type(value) is not hint:
            raise ValueError(f"{where}: expected {hint.__name__}, got {_describe(value)}")
        return
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {_describe(value)}")
        for i, item in enumerate(value):
            check_value(item, args[0], f"{where}[{i}]")
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {_describe(value)}")
        for key, item in value.items():
            check_value(key, args[0], f"{where} key")
            check_value(item, args[1], f"{where}.{key}")
        return
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, hint):
            raise ValueError(f"{where}: expected an object, got {_describe(value)}")
        check(value, where)
        return
    raise TypeError(f"validate: no check for {hint!r} ({where})")  # a bug, not bad input


def check_fields(data: Any, fields: dict[str, Any], where: str) -> None:
    """Check the named keys of a free-form dict (``Run.target``, ``Run.env``) when present."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {_describe(data)}")
    for key, hint in fields.items():
        if key in data:
            check_value(data[key], hint, f"{where}.{key}")
