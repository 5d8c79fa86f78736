"""Built-in targets that reproduce the seed workloads.

Each module holds the model and builders ``baseline``/``fixed`` (or ``build``)
with the signature ``(device: str, preset: str) -> reporter.Target``. Sizes come
from a preset: ``tiny`` for tests, ``default`` for a quick suite on a CPU,
``large`` to fill a GPU. The registry with one line per target is
``reporter.target.BUILTINS``.
"""

from __future__ import annotations

from typing import Any

import torch


def sizes(table: dict[str, dict[str, Any]], preset: str) -> dict[str, Any]:
    return table.get(preset, table["default"])


def synthetic_batches(make, count: int):
    """A fixed list of batches made once in code (no downloads): the runner cycles it."""
    gen = torch.Generator().manual_seed(0)
    return [make(gen) for _ in range(count)]
