"""Convolutional models sized for a GPU, for the Tuning Guide's convolution rules
(issue #66): a ResNet-like stack trained under bf16 autocast in NCHW with cuDNN's
auto-tuner off (PyTorch's defaults), and its twin in ``torch.channels_last`` with the
auto-tuner on. On the CPU they run at a small size (the rules they are for read GPU
kernels and cuDNN's flag)."""

from __future__ import annotations

import torch
from torch import nn

from reporter.collect.target import Target


def _convnet(device: str, channels_last: bool, benchmark: bool) -> Target:
    torch.manual_seed(0)
    gpu = device.startswith("cuda")
    width, size, batch = (128, 56, 64) if gpu else (16, 16, 4)
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1, bias=False),
                               nn.BatchNorm2d(width), nn.ReLU()]
    for _ in range(6):
        layers += [nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                   nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10)]
    model = nn.Sequential(*layers).to(device)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(batch, 3, size, size, generator=gen).contiguous(memory_format=fmt),
                torch.randint(0, 10, (batch,), generator=gen)) for _ in range(2)]
    if gpu:
        torch.backends.cudnn.benchmark = benchmark
    return Target(model=model, batches=batches, batch_size=batch,
                  loss=lambda out, b: nn.functional.cross_entropy(out.float(), b[1]),
                  optimizer=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                  autocast="bf16" if gpu else None)


def convnet_nchw(device: str = "cpu", preset: str = "default") -> Target:
    """NCHW, cuDNN's auto-tuner off: PyTorch's defaults."""
    return _convnet(device, channels_last=False, benchmark=False)


def convnet_channels_last(device: str = "cpu", preset: str = "default") -> Target:
    """The twin: channels_last and ``torch.backends.cudnn.benchmark = True``."""
    return _convnet(device, channels_last=True, benchmark=True)
