"""Benchmark: do the findings' predicted savings come true?

For every built-in baseline and its fixed twin, and the hand-made models with one
planted problem each (tests/models/planted.py: a per-sample loop, dropout) and
their fixes, profiled here one after the other: the share of the step that the
baseline's main problems which the twin no longer has were predicted to save
(reporter.analyze.savings, with its low-high band), against the share the twin
actually saves (1 - baseline throughput / twin throughput, the medians of the
timed windows, with the noise of both intervals), and the error. It also lists
any main problem of the twin that its baseline had too (its fix should have
removed it). Goal: each prediction within 30% of the measured saving, or inside
the measurement's noise.

A pair whose baseline or twin was measured while other work disturbed it (a throughput
without enough undisturbed windows, or disturbed profiled steps: reporter's own busy
checks, see README "A busy machine") is printed but left out of the count, and the row
says so: its measured saving is the machine's load, not the fix. The load average
(1 minute) is printed before each pair and at the end.

Not a test: run it by hand.

    .venv/bin/python bench/diagnosis.py [--device cpu|cuda] [--preset P] [--time-budget 3]
                                        [--only transformer,dropout_heavy] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from reporter.analyze.analyzer import RULES, analyze_section  # noqa: E402
from reporter.collect.runner import RunOptions, default_preset, profile_target  # noqa: E402
from reporter.collect.target import resolve  # noqa: E402

PLANTED = Path(__file__).resolve().parent.parent / "tests" / "models" / "planted.py"
# (baseline, its fix, the name the table gives it)
PAIRS = [(n, f"{n}-fixed", n) for n in ("seq2seq", "transformer-bloat", "cnn", "transformer")]
PAIRS += [(f"{PLANTED}:{a}", f"{PLANTED}:{b}", a) for a, b in
          (("per_sample_loop", "per_sample_batched"), ("dropout_heavy", "dropout_fixed"))]
# findings that are no fault for a twin to fix: the statements (near-roofline)
STATEMENTS = {r.id for r in RULES.values() if r.derive is not None}


def run(name: str, opts: RunOptions, scratch: Path):
    spec, builder = resolve(name)
    r = profile_target(spec, builder, opts, scratch)
    out = {}
    for s in r.sections:
        batch = r.target["batch_size"]
        out[s.label] = (s, analyze_section(s, batch).main)
    return out


def disturbed(section) -> bool:
    """Whether the section's measurements were taken while the machine was busy: its
    throughput had too few undisturbed windows, or its profiled steps were disturbed (a
    disturbed what-if leaves its estimate standing, which is still a prediction)."""
    t, d = section.throughput, section.profile_disturbance
    return bool((t is not None and t.windows and not t.reliable)
                or (d is not None and d.disturbed))


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", default=None,
                        help="model sizes (default: what `reporter run` takes on the device)")
    parser.add_argument("--time-budget", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch's intra-op threads (default: torch's own); 1 degrades "
                             "in proportion on a shared machine")
    parser.add_argument("--only", default=None,
                        help="the pairs whose table name is one of these (comma-separated)")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    only = set(args.only.split(",")) if args.only else None
    opts = RunOptions(device=args.device, time_budget_s=args.time_budget,
                      preset=default_preset(args.device, args.preset), threads=args.threads)
    print(f"device {args.device}, preset {opts.preset}, threads {args.threads or 'default'}, "
          f"{os.cpu_count()} CPUs, "
          f"load {load()}\n")
    scratch = Path(tempfile.mkdtemp(prefix="reporter-diagnosis-"))
    print("| baseline | mode | load | problems its twin fixed | predicted saving "
          "| measured saving | error | still in the twin |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | --- |")
    errors = []
    busy = 0
    for baseline, fix, name in PAIRS:
        if only is not None and name not in only:
            continue
        at = load()
        base, twin = run(baseline, opts, scratch), run(fix, opts, scratch)
        for mode, (s, found) in base.items():
            if mode not in twin:
                continue
            t, twin_found = twin[mode]
            twin_rules = {f.rule for f, _ in twin_found}
            # near-roofline states the step's shape; its lever (a faster dtype) is not
            # what the twins do where it fires, so the twin does not "fix" it
            fixed = [(f, sv) for f, sv in found
                     if f.rule not in twin_rules and f.rule not in STATEMENTS]
            kept = [f.rule for f, _ in found if f.rule in twin_rules and f.rule not in STATEMENTS]
            shares = [(sv.share(sv.saving_us), sv.share(sv.low_us), sv.share(sv.high_us))
                      for _, sv in fixed if sv.saving_us is not None]
            predicted = sum(p for p, _, _ in shares)
            low = sum(lo if lo is not None else p for p, lo, _ in shares)
            high = sum(hi if hi is not None else p for p, _, hi in shares)
            tb, tt = s.throughput, t.throughput
            measured = 1 - tb.median / tt.median if tb and tt and tt.median else None
            noise = None
            if tb and tt and tb.interval and tt.interval:
                noise = (tb.interval.half_width(tb.median) + tt.interval.half_width(tt.median))
            left_out = disturbed(s) or disturbed(t)
            if left_out:
                busy += 1
                err_text = "left out: measured while the machine was busy"
            elif measured is not None and predicted:
                err = predicted - measured
                inside = noise is not None and abs(err) <= noise * (1 - measured)
                rel = abs(err) / abs(measured) if measured else float("inf")
                errors.append((rel <= 0.3) or inside)
                err_text = f"{err * 100:+.1f} pts ({rel:.0%}{', in noise' if inside else ''})"
            else:
                err_text = "—"
            rules = ", ".join(f.rule for f, _ in fixed) or "—"
            print(f"| {name} | {mode} | {at} | {rules} | {predicted:.1%} ({low:.1%}–{high:.1%}) | "
                  + (f"{measured:.1%}" if measured is not None else "—")
                  + (f" (±{noise:.1%})" if noise else "")
                  + f" | {err_text} | {', '.join(kept) or '—'} |")
    met = sum(errors)
    print(f"\nwithin 30% or the noise: {met} of {len(errors)}"
          + (f"; {busy} left out, measured while the machine was busy" if busy else "")
          + f"; load {load()} at the end")


if __name__ == "__main__":
    main()
