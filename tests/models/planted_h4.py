"""Hand-made models with one planted problem each, and their fixes (issue #66, the
Performance Tuning Guide's convolution items). Test-only."""

from __future__ import annotations

import torch
from torch import nn

from reporter.collect.target import Target


def _cnn(bias: bool, device: str) -> Target:
    """A small MobileNet-like CNN trained with SGD on four seeded batches of 16 RGB images
    (32x32): a stem convolution, then three depthwise and pointwise pairs, each
    convolution followed by BatchNorm and ReLU. ``bias``: each convolution has a bias
    (the mistake: BatchNorm cancels it), or not (the fix). Depthwise convolutions do 9
    multiply-adds per output, so a bias's cost is a visible part of them (3-5% of the
    step on one thread of the 2-core machine, 2026-12-04)."""
    torch.manual_seed(0)
    width = 32
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1, bias=bias),
                               nn.BatchNorm2d(width), nn.ReLU()]
    for _ in range(3):
        layers += [nn.Conv2d(width, width, 3, padding=1, groups=width, bias=bias),
                   nn.BatchNorm2d(width), nn.ReLU(),
                   nn.Conv2d(width, width, 1, bias=bias), nn.BatchNorm2d(width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(width, 8)).to(device)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(16, 3, 32, 32, generator=gen), torch.randint(0, 8, (16,),
                                                                          generator=gen))
               for _ in range(4)]
    return Target(model=model, batches=batches, batch_size=16,
                  loss=lambda out, batch: nn.functional.cross_entropy(out, batch[1]),
                  optimizer=torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))


def conv_bias_bn(device: str = "cpu", preset: str = "default") -> Target:
    """Every convolution has a bias, and BatchNorm follows each."""
    return _cnn(True, device)


def conv_no_bias_bn(device: str = "cpu", preset: str = "default") -> Target:
    """The same CNN with ``bias=False`` in every convolution."""
    return _cnn(False, device)
