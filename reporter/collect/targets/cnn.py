"""cnn (seed 002): a CNN starved by its DataLoader.

The baseline augments every sample on the CPU inside the Dataset (blurs,
resize, normalisation, one image at a time, every time it is read), loads with
num_workers=0 into pageable memory and copies batches synchronously: the step
waits in ``enumerate(DataLoader)`` as in the seed. The fixed twin applies the
advice the report gives: the augmentation does not change between epochs, so
it is computed once, for all images at a time, when the target is built; the
loader then only indexes, with worker processes, pinned memory (on a GPU) and
non_blocking copies. Both feed the model the same images.
"""

from __future__ import annotations

import os

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler
from ...model.device import is_gpu

from ..target import Target
from . import sizes

SIZES = {
    "tiny": dict(batch=4, image=16, channels=4, images=32, blur=1),
    "default": dict(batch=64, image=64, channels=8, images=256, blur=6),
    # 1,024 images: cnn-fixed augments them all when it is built (4,096 took tens of
    # seconds of CPU convolutions before a GPU run began); batches sample with replacement
    "large": dict(batch=256, image=128, channels=64, images=1024, blur=6),
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


def raw_image(i: int, size: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(i)
    return torch.rand(3, size * 2, size * 2, generator=gen)


class AugmentEveryTime(Dataset):
    """The seed's loader: each read makes the image and augments it again."""

    def __init__(self, count: int, size: int, blur: int):
        self.count, self.size, self.blur = count, size, blur

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i):
        img = augment(raw_image(i, self.size).unsqueeze(0), self.blur, self.size)[0]
        return img, i % 10


class Precomputed(Dataset):
    """The same images, augmented once (in batches) when the dataset is made."""

    def __init__(self, count: int, size: int, blur: int):
        chunks = []
        with torch.no_grad():
            for start in range(0, count, 64):
                raw = torch.stack([raw_image(i, size)
                                   for i in range(start, min(count, start + 64))])
                chunks.append(augment(raw, blur, size))
        self.images = torch.cat(chunks)
        self.labels = torch.arange(count) % 10

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], int(self.labels[i])

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        """A whole batch in one indexing (the DataLoader asks for it so), instead of one
        per sample and a stack: without workers (a small /dev/shm) the main thread does
        it between steps."""
        index = torch.as_tensor(indices)
        return [self.images[index], self.labels[index]]


def batched(batch: list[torch.Tensor]) -> list[torch.Tensor]:
    """The collate of a batch that __getitems__ already made whole."""
    return batch


def make_model(channels: int, classes: int = 10) -> nn.Module:
    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.MaxPool2d(2)]
    return nn.Sequential(*block(3, channels), *block(channels, channels * 2),
                         *block(channels * 2, channels * 2), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(channels * 2, classes))


WORKERS, PREFETCH = 2, 4


def _shared_memory_free() -> int | None:
    """Free bytes in /dev/shm, where worker processes hand their batches over."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _worker_settings(batch_bytes: int, shm_free: int | None) -> dict:
    """DataLoader workers whose prefetched batches fit in shared memory (Docker gives
    64 MB by default: at the large preset one batch is 50 MB), with half of it to spare;
    none at all when not even one batch per worker fits."""
    if shm_free is None:
        return dict(num_workers=WORKERS, persistent_workers=True, prefetch_factor=PREFETCH)
    per_worker = shm_free // 2 // WORKERS // max(batch_bytes, 1)
    if per_worker < 1:
        return dict(num_workers=0)
    return dict(num_workers=WORKERS, persistent_workers=True,
                prefetch_factor=int(min(PREFETCH, per_worker)))


def _build(device: str, preset: str, fixed: bool) -> Target:
    s = sizes(SIZES, preset)
    torch.manual_seed(0)
    model = make_model(s["channels"]).to(device)
    dataset = (Precomputed if fixed else AugmentEveryTime)(s["images"], s["image"], s["blur"])
    # Sampling with replacement makes one epoch longer than any run: a new epoch
    # would restart the workers' prefetching, a wait that is not the loader's fault.
    sampler = RandomSampler(dataset, replacement=True, num_samples=1 << 30,
                            generator=torch.Generator().manual_seed(0))
    loader_args = dict(batch_size=s["batch"], sampler=sampler, drop_last=True)
    if fixed:
        batch_bytes = s["batch"] * 3 * s["image"] ** 2 * 4
        loader_args.update(_worker_settings(batch_bytes, _shared_memory_free()),
                           pin_memory=is_gpu(device), collate_fn=batched)
    return Target(
        model=model, batches=DataLoader(dataset, **loader_args), batch_size=s["batch"],
        non_blocking=fixed,
        loss=lambda out, batch: nn.functional.cross_entropy(out, batch[1]),
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
    )


def baseline(device: str = "cpu", preset: str = "default") -> Target:
    return _build(device, preset, fixed=False)


def fixed(device: str = "cpu", preset: str = "default") -> Target:
    return _build(device, preset, fixed=True)
