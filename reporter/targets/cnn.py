"""cnn (seed 002): a CNN starved by its DataLoader.

The baseline augments each sample on the CPU inside the Dataset (blurs,
resize, normalisation, one image at a time), loads with num_workers=0 into
pageable memory, and copies batches synchronously: the step waits in
``enumerate(DataLoader)`` as in the seed. The fixed twin loads raw images with
worker processes, pinned memory (on a GPU) and non_blocking copies, and runs
the same augmentation once per batch on the device. Both compute the same
function of the same images.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..target import Target
from . import sizes

SIZES = {
    "tiny": dict(batch=4, image=16, channels=4, samples=16, blur=1),
    "default": dict(batch=16, image=48, channels=8, samples=256, blur=6),
    "large": dict(batch=256, image=128, channels=64, samples=8192, blur=6),
}


def augment(images: torch.Tensor, blur: int, size: int) -> torch.Tensor:
    """Blur, resize and normalise a batch (N, 3, 2*size, 2*size) -> (N, 3, size, size)."""
    kernel = torch.full((3, 1, 5, 5), 1 / 25.0, device=images.device, dtype=images.dtype)
    for _ in range(blur):
        images = nn.functional.conv2d(images, kernel, padding=2, groups=3)
    images = nn.functional.interpolate(images, size=(size, size), mode="bilinear",
                                       align_corners=False)
    mean = images.mean(dim=(2, 3), keepdim=True)
    std = images.std(dim=(2, 3), keepdim=True)
    return (images - mean) / (std + 1e-5)


class Images(Dataset):
    """Synthetic images made in code; optionally augmented one sample at a time."""

    def __init__(self, count: int, size: int, blur: int, per_sample_augment: bool):
        self.count, self.size, self.blur = count, size, blur
        self.per_sample_augment = per_sample_augment

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i):
        gen = torch.Generator().manual_seed(i)
        img = torch.rand(3, self.size * 2, self.size * 2, generator=gen)
        if self.per_sample_augment:  # the expensive part of the seed's loader
            img = augment(img.unsqueeze(0), self.blur, self.size)[0]
        return img, i % 10


def make_model(channels: int, classes: int = 10) -> nn.Module:
    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.MaxPool2d(2)]
    return nn.Sequential(*block(3, channels), *block(channels, channels * 2),
                         *block(channels * 2, channels * 2), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(channels * 2, classes))


def _build(device: str, preset: str, fixed: bool) -> Target:
    s = sizes(SIZES, preset)
    torch.manual_seed(0)
    model = make_model(s["channels"]).to(device)
    loader_args = dict(batch_size=s["batch"], shuffle=True, drop_last=True)
    if fixed:
        loader_args.update(num_workers=2, persistent_workers=True, prefetch_factor=4,
                           pin_memory=device.startswith("cuda"))
    data = DataLoader(Images(s["samples"], s["image"], s["blur"], per_sample_augment=not fixed),
                      **loader_args)
    if fixed:
        forward = lambda m, batch: m(augment(batch[0], s["blur"], s["image"]))  # noqa: E731
    else:
        forward = None
    return Target(
        model=model, batches=data, batch_size=s["batch"], non_blocking=fixed, forward=forward,
        loss=lambda out, batch: nn.functional.cross_entropy(out, batch[1]),
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
    )


def baseline(device: str = "cpu", preset: str = "default") -> Target:
    return _build(device, preset, fixed=False)


def fixed(device: str = "cpu", preset: str = "default") -> Target:
    return _build(device, preset, fixed=True)
