"""Planted models for the near-roofline lever (issue #66, item 4): matrix products that
bound the step and run near their roofline in fp32, where a dtype with a higher peak is
the lever left; whether it saves what the peaks promise is timed on the model."""

from __future__ import annotations

import torch
from torch import nn

from reporter.collect.target import Target


def wide_mlp_train(device: str = "cpu", preset: str = "default") -> Target:
    """Four 1024-wide linear layers in training, batch 256: the products are the step."""
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(1024, 1024), nn.ReLU())]
                          ).to(device)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(256, 1024, generator=gen),) for _ in range(2)]
    return Target(model=model, batches=batches, batch_size=256,
                  loss=lambda out, batch: out.float().pow(2).mean(),
                  optimizer=torch.optim.SGD(model.parameters(), lr=1e-3))


def wide_mlp_train_tf32(device: str = "cpu", preset: str = "default") -> Target:
    """The same step with TF32 on, sized for a GPU there (a 256-wide input projected to
    8192, eight 8192-wide layers, batch 2048: 6.6 TFLOP a step against a 2 MB input
    copy): the products run near their TF32 roofline and bf16, twice its peak on an
    H100 or H200, is the lever left."""
    torch.manual_seed(0)
    gpu = device.startswith("cuda")
    width, depth, batch = (8192, 8, 2048) if gpu else (1024, 4, 256)
    layers: list[nn.Module] = [nn.Linear(256, width)]
    for _ in range(depth):
        layers += [nn.ReLU(), nn.Linear(width, width)]
    model = nn.Sequential(*layers).to(device)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(batch, 256, generator=gen),) for _ in range(2)]
    return Target(model=model, batches=batches, batch_size=batch,
                  loss=lambda out, batch: out.float().pow(2).mean(),
                  optimizer=torch.optim.SGD(model.parameters(), lr=1e-3), tf32=True)


def wide_mlp_train_bf16(device: str = "cpu", preset: str = "default") -> Target:
    """``wide_mlp_train`` under bf16 autocast: the lever applied (its twin in
    bench/diagnosis.py)."""
    t = wide_mlp_train(device, preset)
    t.autocast = "bf16"
    return t
