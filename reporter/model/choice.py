"""A sentence choice: where a report says one thing or another, which sentence, chosen in
Python from the values where it is said; each language only words the sentences
(reporter.render.sentences places them). A rule declares its findings' choices beside its
detection (``@rule(..., says={slot: Choice})``, reporter.analyze.findings); the report's
own choices are in reporter.render.sentences, over the typed values each view carries
(reporter.render.choices).

A choice returns the name of a sentence (a macro of that name in each language's
template), or None: nothing is said there. ``Choice.names`` lists every sentence it may
choose; tests/test_sentences.py holds each language to word every one of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from .finding import Evidence

Values = Any  # the values where the slot is: a jinja2 Context, or what a sentence is about
Test = Callable[[Values], Any]


@dataclass(frozen=True)
class Choice:
    """A slot's choice: the sentences it may choose, and which one, from the values."""

    names: tuple[str, ...]
    pick: Callable[[Values], str | None]


def when(name: str, test: Test) -> Choice:
    """The sentence ``name`` when ``test`` holds, else nothing."""
    return Choice((name,), lambda v: name if test(v) else None)


def either(yes: str, no: str, test: Test) -> Choice:
    """``yes`` when ``test`` holds, else ``no``."""
    return Choice((yes, no), lambda v: yes if test(v) else no)


def first(*cases: tuple[str | None, Test]) -> Choice:
    """The sentence of the first case whose test holds (None: nothing said)."""
    def pick(v: Values) -> str | None:
        return next((name for name, test in cases if test(v)), None)
    return Choice(tuple(n for n, _ in cases if n), pick)


# Tests over a finding's values: its evidence, as its rule's class (``of``: mypy checks
# the fields a test reads), and the report's own values (``on_gpu``).

E = TypeVar("E", bound=Evidence)


def evidence(v: Values) -> Evidence:
    """The finding's evidence (its view carries it: finding_view._finding_view)."""
    e = v["f"]["evidence"]
    if not isinstance(e, Evidence):
        raise TypeError(f"a finding's words read {type(e).__name__}, not its evidence")
    return e


def of(cls: type[E]) -> Callable[[Values], E]:
    """The finding's evidence as its rule's class, whose fields mypy checks:
    ``of(SyncStall)(v).item_calls``."""
    def get(v: Values) -> E:
        e = evidence(v)
        if not isinstance(e, cls):
            raise TypeError(f"a {cls.__name__} finding's words read {type(e).__name__}")
        return e
    return get


def steps(v: Values) -> int:
    """The profiled steps a total in the evidence is over (0: not said)."""
    return evidence(v).steps or 0


def always(v: Values) -> bool:
    return True


def on_gpu(v: Values) -> bool:
    return bool(v["on_gpu"])


# A time summed over the profiled steps says so ("over 4 steps").
OVER_STEPS = when("over_steps", lambda v: steps(v) > 1)
# zh says "all the recorded steps" where the others say nothing
OVER_STEPS_OR_ALL = either("over_steps", "all_steps", lambda v: steps(v) > 1)
