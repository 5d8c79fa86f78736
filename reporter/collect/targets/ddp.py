"""ddp: a model trained with DistributedDataParallel (gloo on the CPU, NCCL on GPUs).

Run it on several ranks: ``reporter run --nproc 2 --target ddp`` (or under
torchrun). Each rank trains on its own batches; DDP all-reduces the gradients
bucket by bucket during backward, which is the communication the report
measures and the part of it that overlaps the backward pass.
"""

from __future__ import annotations

import torch
from torch import nn

from ...errors import BadInput
from ...model.device import is_gpu
from ..target import Target
from . import sizes, synthetic_batches

SIZES = {
    "tiny": dict(batch=8, dim=64, layers=2, batches=2),
    "default": dict(batch=32, dim=512, layers=6, batches=4),
    "large": dict(batch=256, dim=4096, layers=8, batches=4),
}


def build(device: str = "cpu", preset: str = "default") -> Target:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise BadInput("the ddp target trains on several ranks: run it with "
                       "'reporter run --nproc 2 --target ddp' or under torchrun",
                       error_id="bad-target")
    s = sizes(SIZES, preset)
    torch.manual_seed(0)  # the same initial weights on every rank
    layers = []
    for _ in range(s["layers"]):
        layers += [nn.Linear(s["dim"], s["dim"]), nn.ReLU()]
    model: nn.Module = nn.Sequential(*layers, nn.Linear(s["dim"], 10)).to(device)
    ids = [torch.device(device).index or 0] if is_gpu(device) else None
    model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    rank = dist.get_rank()
    batches = synthetic_batches(
        lambda g: (torch.randn(s["batch"], s["dim"], generator=g),
                   torch.randint(0, 10, (s["batch"],), generator=g)), s["batches"] + rank)
    return Target(
        model=model, batches=batches[rank:], batch_size=s["batch"],
        loss=lambda out, batch: nn.functional.cross_entropy(out, batch[1]),
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
    )
