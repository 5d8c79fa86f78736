"""Analyze: the Profile model and everything that reads it (step breakdown, FLOPs and
efficiency, rules and findings, what each is worth), from recorded data only: no torch, no
other stage (device timing lives in reporter.collect).

Importing any module of it registers the built-in rules and statements, so that the
registry (reporter.analyze.findings.RULES) is whole wherever a finding is read."""

from . import compiled, roofline, rules  # noqa: F401  (register the built-in rules and statements)
