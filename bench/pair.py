"""Benchmark: a baseline target against the target its report's advice made, interleaved.

Builds both targets in one process and times their training (or inference) steps in
alternation, round by round, so that both see the same load: wall time and the
process's CPU time per step (the CPU time moves less with other work on the machine).
The order is swapped each round, so that neither always runs on the caches the other
left. Prints the medians with their range and the saving of the second over the first
(1 - its step / the baseline's), with the load average before and after. The mode is the
baseline's first (a target built for inference only has no loss to train on); a mode
either target was not built for is refused.

With ``--processes N`` each side is stepped in fresh processes of its own instead, N of
each, alternating (the order swapped each pair), as a user who applies the advice and
runs again gets it: in one process each model's allocations change the other's page
faults and caches (RoBERTa in inference, eager against SDPA, 2026-11-28: 35-40% saved
interleaved in one process, 0-7% in runs of their own). The figures are then the
processes' medians, and the paired range is over the pairs of processes.

Not a test: run it by hand.

    .venv/bin/python bench/pair.py tests/models/hf.py:bart_train \\
        tests/models/hf.py:bart_train_bf16 [--rounds 9] [--steps 5] [--mode train|inference] \\
        [--threads 1] [--processes 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch  # noqa: E402

from reporter.collect.target import resolve  # noqa: E402


def build(name: str):
    _, builder = resolve(name)
    return builder("cpu", "default")


def stepper(t, mode: str):
    forward = t.forward or (lambda model, batch: model(batch[0]))
    batches = list(t.batches)
    i = [0]

    def step() -> None:
        batch = batches[i[0] % len(batches)]
        i[0] += 1
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(t.autocast or "")
        if mode == "train":
            t.model.train()
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                loss = t.loss(forward(t.model, batch), batch)
            loss.backward()
            t.optimizer.step()
            t.optimizer.zero_grad(set_to_none=True)
        else:
            with torch.inference_mode(), torch.autocast("cpu", dtype=dtype,
                                                        enabled=dtype is not None):
                forward(t.model, batch)
    return step


def timed(step, steps: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    return (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps


def apart(args: argparse.Namespace, mode: str) -> dict[str, list[tuple[float, float]]]:
    """Each side's median (wall, CPU) step in each of ``args.processes`` fresh processes
    of its own, the sides alternating, the order swapped each pair."""
    got: dict[str, list[tuple[float, float]]] = {args.baseline: [], args.fixed: []}
    for p in range(args.processes):
        for n in ([args.baseline, args.fixed] if p % 2 == 0 else [args.fixed, args.baseline]):
            child = subprocess.run(
                [sys.executable, __file__, n, n, "--alone", "--mode", mode,
                 "--rounds", str(args.rounds), "--steps", str(args.steps)]
                + (["--threads", str(args.threads)] if args.threads else []),
                capture_output=True, text=True)
            if child.returncode != 0:
                last = (child.stderr.strip().splitlines() or ["no output"])[-1]
                raise SystemExit(f"error: stepping {n} failed: {last}")
            wall, cpu = json.loads(child.stdout.strip().splitlines()[-1])
            got[n].append((wall, cpu))
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline")
    parser.add_argument("fixed")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--mode", default=None, choices=("train", "inference"),
                        help="default: the baseline's first mode")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--processes", type=int, default=0,
                        help="step each side in N fresh processes of its own instead")
    parser.add_argument("--alone", action="store_true", help=argparse.SUPPRESS)  # a child
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    names = [args.baseline] if args.alone else [args.baseline, args.fixed]
    targets = {n: build(n) for n in names}
    mode = args.mode or targets[args.baseline].modes[0]
    for n, t in targets.items():
        if mode not in t.modes:
            raise SystemExit(f"error: {n} is built for {', '.join(t.modes)}, not {mode}")
    args.mode = mode
    if args.processes:
        got = apart(args, mode)
        where = f"{args.processes} processes a side, alternating"
    else:
        steps = {n: stepper(t, mode) for n, t in targets.items()}
        for s in steps.values():  # warm-up
            timed(s, 2)
        got = {n: [] for n in steps}
        for r in range(args.rounds):
            for n in (list(steps) if r % 2 == 0 else list(steps)[::-1]):
                got[n].append(timed(steps[n], args.steps))
        if args.alone:
            print(json.dumps([statistics.median(r[k] for r in got[args.baseline])
                              for k in (0, 1)]))
            return
        where = "interleaved in one process"
    print(f"{args.rounds} rounds of {args.steps} {args.mode} steps each, {where}, "
          f"{torch.get_num_threads()} threads, load {load:.1f} -> {os.getloadavg()[0]:.1f}")
    med = {}
    for n, rows in got.items():
        for k, label in ((0, "wall"), (1, "CPU")):
            v = [r[k] * 1e3 for r in rows]
            med[(n, k)] = statistics.median(v)
            print(f"  {Path(n).name:45s} {label:4s} {med[(n, k)]:8.2f} ms "
                  f"({min(v):.2f}-{max(v):.2f})")
    for k, label in ((0, "wall"), (1, "CPU")):
        base, fix = med[(args.baseline, k)], med[(args.fixed, k)]
        paired = [1 - f[k] / b[k] for b, f in zip(got[args.baseline], got[args.fixed])]
        print(f"saving ({label}): {1 - fix / base:.1%} of the baseline's step "
              f"({'pairs of processes' if args.processes else 'paired rounds'} "
              f"{min(paired):.1%} to {max(paired):.1%})")


if __name__ == "__main__":
    main()
