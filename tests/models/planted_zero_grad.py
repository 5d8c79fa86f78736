"""A user's own training loop whose optimizer zeroes the gradients in place
(``zero_grad(set_to_none=False)``) and its fix (``set_to_none=True``), profiled with
torch.profiler as the user would and exported: the zero-grad-fill rule is read from such
profiles (the runner calls ``zero_grad(set_to_none=True)`` itself). Wide layers and a
small batch, so that filling the gradients is a visible part of the step. Used by
tests/test_zero_grad.py and bench/imported.py."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch


def loop(set_to_none: bool, width: int = 512, layers: int = 8,
         batch: int = 4) -> Callable[[], None]:
    """One training step of the loop (forward, backward, SGD step, zero_grad), as a
    function to call."""
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, generator=g)

    def step() -> None:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)
    return step


def profiled(step: Callable[[], None], folder: Path, name: str,
             active: int = 4) -> tuple[Path, Path]:
    """``step`` profiled as a user does (a schedule: one step skipped, one warm-up,
    ``active`` recorded), written as a Chrome trace and as the operator table
    torch.profiler prints; their paths."""
    from torch.profiler import ProfilerActivity, profile, schedule

    for _ in range(3):  # the first steps allocate the gradients
        step()
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=1, warmup=1, active=active)) as prof:
        for _ in range(active + 2):
            step()
            prof.step()
    trace = folder / f"{name}.json"
    prof.export_chrome_trace(str(trace))
    table = folder / f"{name}.txt"
    table.write_text(prof.key_averages().table(sort_by="cpu_time_total", row_limit=-1),
                     encoding="utf-8")
    return trace, table
