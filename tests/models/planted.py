"""Hand-made models with one planted problem each, and their fixes. Test-only."""

from __future__ import annotations

import torch
from torch import nn

from reporter.collect.target import Target


def _classifier(model: nn.Module, width: int, batch: int, optimizer: type = torch.optim.SGD,
                dtype: torch.dtype = torch.float32) -> Target:
    """A training target for a model that maps ``width`` features to 8 classes: four
    seeded batches of ``batch`` rows in ``dtype``, cross-entropy, ``optimizer`` at 1e-3."""
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(batch, width, generator=gen, dtype=dtype),
                torch.randint(0, 8, (batch,), generator=gen)) for _ in range(4)]
    return Target(model=model, batches=batches, batch_size=batch,
                  loss=lambda out, batch: nn.functional.cross_entropy(out, batch[1]),
                  optimizer=optimizer(model.parameters(), lr=1e-3))


def _mlp_train(p: float, device: str) -> Target:
    """An MLP training step whose wide activations each go through dropout with rate
    ``p`` (0: no dropout, the fix)."""
    torch.manual_seed(0)
    # 128 wide, batches of 256: a mask costs the same per element whatever the width, a
    # product grows with it. At 1,024 wide (batch 64) the masks sat at the rule's 10%
    # threshold; at 256, 13-14% quiet and under 10% in some loaded runs.
    width, batch = 128, 256
    layers: list[nn.Module] = []
    for _ in range(3):
        layers += [nn.Linear(width, width), nn.GELU(), nn.Dropout(p) if p else nn.Identity()]
    return _classifier(nn.Sequential(*layers, nn.Linear(width, 8)).to(device), width, batch)


def dropout_heavy(device: str = "cpu", preset: str = "default") -> Target:
    """Dropout (p=0.1) after every hidden layer of a wide MLP."""
    return _mlp_train(0.1, device)


def dropout_fixed(device: str = "cpu", preset: str = "default") -> Target:
    """The same MLP without dropout."""
    return _mlp_train(0.0, device)


class _PerSample(nn.Module):
    """An MLP applied to one sample at a time in a Python loop over the batch (the
    planted problem), or to the whole batch in one call (its fix)."""

    def __init__(self, batched: bool) -> None:
        super().__init__()
        self.batched = batched
        self.mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                                 nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.batched:
            return self.mlp(x)
        return torch.stack([self.mlp(row) for row in x])


def _per_sample(batched: bool, device: str) -> Target:
    torch.manual_seed(0)
    model = _PerSample(batched).to(device).eval()
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(64, 64, generator=gen),) for _ in range(4)]
    return Target(model=model, batches=batches, batch_size=64, modes=("inference",))


def per_sample_loop(device: str = "cpu", preset: str = "default") -> Target:
    """A small MLP called once per sample of a batch of 64."""
    return _per_sample(False, device)


def per_sample_batched(device: str = "cpu", preset: str = "default") -> Target:
    """The same MLP called once on the whole batch."""
    return _per_sample(True, device)


class _FreshBuffer(nn.Module):
    """A small product on top of a 64 MiB buffer zeroed afresh in every call: each step's
    time is mostly the first touch of fresh pages (glibc maps an allocation over 32 MiB,
    its largest mmap threshold, afresh each time and unmaps it when it is freed). With
    ``reuse``, the fix: the buffer is allocated once and zeroed again in each call."""

    def __init__(self, reuse: bool = False) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 64)
        self.kept = torch.zeros(16 << 20) if reuse else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scratch = self.kept.zero_() if self.kept is not None else torch.zeros(16 << 20)
        return self.proj(x) + scratch[: x.shape[-1]]


def _buffer(reuse: bool, device: str) -> Target:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    return Target(model=_FreshBuffer(reuse).to(device).eval(), batch_size=8,
                  modes=("inference",),
                  batches=[(torch.randn(8, 64, generator=gen),) for _ in range(2)])


def first_touch(device: str = "cpu", preset: str = "default") -> Target:
    """Inference of a model that zeroes a fresh 64 MiB buffer in each call."""
    return _buffer(False, device)


def first_touch_reused(device: str = "cpu", preset: str = "default") -> Target:
    """The same model with its buffer allocated once and zeroed in each call."""
    return _buffer(True, device)


def _mlp_dtype(dtype: torch.dtype, device: str) -> Target:
    """A wide MLP trained with Adam, its parameters and inputs in ``dtype``: float64 is
    the mistake (a model built with torch.set_default_dtype(torch.float64), or a NumPy
    array's float64 turned into a tensor), float32 the fix."""
    torch.manual_seed(0)
    width, batch = 512, 256
    layers: list[nn.Module] = []
    for _ in range(3):
        layers += [nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width)]
    model = nn.Sequential(*layers, nn.Linear(width, 8)).to(device=device, dtype=dtype)
    return _classifier(model, width, batch, torch.optim.Adam, dtype)


def float64_mlp(device: str = "cpu", preset: str = "default") -> Target:
    """The MLP in float64."""
    return _mlp_dtype(torch.float64, device)


def float32_mlp(device: str = "cpu", preset: str = "default") -> Target:
    """The same MLP in float32."""
    return _mlp_dtype(torch.float32, device)


class _QuickGELU(nn.Module):
    """CLIP's activation: element-wise on one tensor, no pairwise product."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


def quick_gelu_mlp(device: str = "cpu", preset: str = "default") -> Target:
    """A healthy MLP whose wide hidden layers use quick_gelu: its element-wise time is
    large and is no blow-up (no finding of elementwise-blowup)."""
    torch.manual_seed(0)
    width, hidden, batch = 64, 2048, 512
    model = nn.Sequential(nn.Linear(width, hidden), _QuickGELU(), nn.Linear(hidden, width),
                          _QuickGELU(), nn.Linear(width, 8)).to(device)
    return _classifier(model, width, batch)
