"""What each built-in target needs at each preset: the peak of the tensors one step holds
(parameters, gradients, optimizer state, activations, temporaries, inputs), per mode.

Computed on the CPU without allocating: the target is built on torch's ``meta`` device
(tensors with shapes and dtypes, no storage, no arithmetic) and one step of each mode
runs under ``torch.distributed._tools.mem_tracker.MemTracker``, after a first step that
makes the optimizer's state. It counts what the caching allocator would be asked for,
not the CUDA context, cuBLAS/cuDNN workspaces or the allocator's rounding and
fragmentation (the reserved peak): a GPU needs some hundreds of MB to a few GB more.
Checked against the H100 run (tests/fixtures/runs/cuda-h100-transformer): `transformer`
at `large` computes 31.56 GB for training and 5.14 GB for inference, where the GPU
allocated 31.63 GB and 5.21 GB.

    .venv/bin/python bench/preset_memory.py [--presets tiny,default,large] [TARGET ...]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def need_gb(name: str, preset: str) -> dict[str, float]:
    """GB (1e9 bytes) per mode at this preset."""
    from torch.distributed._tools.mem_tracker import MemTracker

    from reporter.collect.runner import _Stepper
    from reporter.collect.target import BUILTINS, build

    target = build(name, BUILTINS[name].builder(), "meta", preset)
    out = {}
    for mode in target.modes:
        step = _Stepper(target, mode, "meta")
        step()  # the optimizer makes its state in the first step
        tracker = MemTracker()
        tracker.track_external(*(x for x in (target.model, target.optimizer) if x is not None))
        with tracker:
            step()
        peaks = tracker.get_tracker_snapshot("peak")
        out[mode] = max(d.get("Total", 0) for d in peaks.values()) / 1e9
    return out


def main() -> None:
    from reporter.collect.target import DEFAULT_SUITE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", default=list(DEFAULT_SUITE))
    parser.add_argument("--presets", default="tiny,default,large")
    args = parser.parse_args()
    presets = args.presets.split(",")
    warnings.simplefilter("ignore")
    print("| target | " + " | ".join(presets) + " |")
    print("| --- |" + " --- |" * len(presets))
    for name in args.targets:
        cells = []
        for preset in presets:
            got = need_gb(name, preset)
            cells.append(", ".join(f"{mode} {gb:.2f}" for mode, gb in got.items()))
        print(f"| `{name}` | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
