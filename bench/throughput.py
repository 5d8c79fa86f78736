"""Benchmark: reporter's throughput against an independent timing of the same step.

For three built-in targets (training step, the sizes `reporter run` takes on the device),
in one process and interleaved round by round to cancel drift, it measures:
- reporter: the timed windows of a run (reporter.collect.runner._timed_windows with the
  default options: 5+ windows of ~0.25 s, up to the default budget, early stop at
  +-2%), giving the median and its confidence interval;
- independent: torch.utils.benchmark.Timer.blocked_autorange on the same step
  (its own blocks, its own median), as samples/s.
It prints, per target, the median of each over the rounds, their ratio, whether
the independent value lies in reporter's interval, and the interval's
half-width and confidence. Goal: within 3%, and inside the interval.

    .venv/bin/python bench/throughput.py [--rounds 3] [--device cpu|cuda] [--preset P]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.utils.benchmark import Timer  # noqa: E402

from reporter.collect.runner import (  # noqa: E402
    RunOptions,
    _Stepper,
    _sync,
    _timed,
    _timed_windows,
    default_preset,
    window_steps,
)
from reporter.collect.target import build, resolve  # noqa: E402
from reporter.model.stats import median_interval  # noqa: E402

TARGETS = ("transformer-bloat-fixed", "seq2seq-fixed", "transformer")


def reporter_windows(stepper, device: str, batch: int, opts: RunOptions) -> list[float]:
    """The undisturbed windows (a run's median is of these; bench/contention.py measures
    what a busy machine does to them)."""
    steps = window_steps(stepper, device, opts)
    windows, disturbance = _timed_windows(
        lambda: steps * batch / _timed(stepper, device, steps), opts, opts.time_budget_s,
        lambda msg: None, steps)
    return [w for w, d in zip(windows, disturbance) if not d.disturbed] or windows


def independent(stepper, device: str, batch: int) -> float:
    def step():
        stepper()
        _sync(device)
    m = Timer(stmt="step()", globals={"step": step},
              num_threads=torch.get_num_threads()).blocked_autorange(min_run_time=1.5)
    return batch / m.median


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--preset", default=None,
                        help="model sizes (default: what `reporter run` takes on the device)")
    args = parser.parse_args()
    preset = default_preset(args.device, args.preset)
    opts = RunOptions(device=args.device, preset=preset)
    print(f"device {args.device}, preset {preset}, torch {torch.__version__}, threads "
          f"{torch.get_num_threads()}, {args.rounds} interleaved rounds")
    print(f"{'target':<26}{'reporter':>10}{'indep.':>10}{'ratio':>8}  "
          f"{'interval (half, conf.)':<26}"
          f"{'inside':>7}{'windows':>9}")
    for name in TARGETS:
        spec, builder = resolve(name)
        target = build(spec, builder, args.device, preset)
        stepper = _Stepper(target, "train", args.device)
        for _ in range(opts.warmup_steps):
            stepper()
        ours, theirs, widths, inside, counts = [], [], [], [], []
        for _ in range(args.rounds):
            windows = reporter_windows(stepper, args.device, target.batch_size, opts)
            median = statistics.median(windows)
            iv = median_interval(windows)
            other = independent(stepper, args.device, target.batch_size)
            ours.append(median)
            theirs.append(other)
            widths.append((iv.half_width(median), iv.confidence))
            inside.append(iv.low <= other <= iv.high)
            counts.append(len(windows))
        a, b = statistics.median(ours), statistics.median(theirs)
        half = statistics.median(w for w, _ in widths)
        conf = min(c for _, c in widths)
        print(f"{name:<26}{a:>10.1f}{b:>10.1f}{a / b:>8.3f}  "
              f"{f'±{half:.1%} ({conf:.1%})':<26}{f'{sum(inside)}/{len(inside)}':>7}"
              f"{statistics.median(counts):>9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
