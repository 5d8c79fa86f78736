"""Planted models for the process-state checks (issue 66, items 1 and 3): a training step
with autograd's anomaly detection left on (globally, or entered inside the step) and its
twin without it; an inference target whose own forward would build autograd state (its
model handed over in training mode, grad mode on), and its twin that does not. Test-only."""

from __future__ import annotations

import torch
from torch import nn

from reporter.collect.target import Target


def _mlp(width: int = 256, depth: int = 6) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width)]
    return nn.Sequential(*layers, nn.Linear(width, 8))


def _train(forward=None, width: int = 256, batch: int = 64, device: str = "cpu") -> Target:
    model = _mlp(width).to(device)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(batch, width, generator=gen),
                torch.randint(0, 8, (batch,), generator=gen)) for _ in range(4)]
    return Target(model=model, batches=batches, batch_size=batch,
                  loss=lambda out, b: nn.functional.cross_entropy(out, b[1]),
                  optimizer=torch.optim.SGD(model.parameters(), lr=1e-3), forward=forward)


def anomaly_on(device: str = "cpu", preset: str = "default") -> Target:
    """A training step with ``torch.autograd.set_detect_anomaly(True)`` left on, as a
    debugging session leaves it (set when the target is built)."""
    torch.autograd.set_detect_anomaly(True)
    return _train(device=device)


def anomaly_in_step(device: str = "cpu", preset: str = "default") -> Target:
    """The forward run inside ``with torch.autograd.detect_anomaly():`` (the backward
    outside it)."""
    def forward(model: nn.Module, batch):
        with torch.autograd.detect_anomaly():
            return model(batch[0])
    return _train(forward, device=device)


def anomaly_off(device: str = "cpu", preset: str = "default") -> Target:
    """The same training step, anomaly detection off: the twin."""
    return _train(device=device)


def anomaly_set_in_step(device: str = "cpu", preset: str = "default") -> Target:
    """The step's own code turns anomaly detection on each step
    (``torch.autograd.set_detect_anomaly(True)`` before the forward, as a debugging
    session leaves it in a training loop): on for the forward and the backward. Unlike
    ``anomaly_on`` it can be timed in alternation with its twin in one process
    (bench/diagnosis.py), since each step sets the mode its own code says."""
    def forward(model: nn.Module, batch):
        torch.autograd.set_detect_anomaly(True)
        return model(batch[0])
    return _train(forward, device=device)


def anomaly_unset_in_step(device: str = "cpu", preset: str = "default") -> Target:
    """The fix of ``anomaly_set_in_step``: the line says False."""
    def forward(model: nn.Module, batch):
        torch.autograd.set_detect_anomaly(False)
        return model(batch[0])
    return _train(forward, device=device)


class _Inference(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Dropout(0.1),
                                  nn.Linear(4 * width, width), nn.GELU(), nn.Dropout(0.1),
                                  nn.Linear(width, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _inference(eval_: bool, width: int = 256, batch: int = 256, device: str = "cpu"
               ) -> Target:
    torch.manual_seed(0)
    model = _Inference(width).to(device)
    if eval_:
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(batch, width, generator=gen),) for _ in range(4)]
    return Target(model=model, batches=batches, batch_size=batch, modes=("inference",))


def inference_autograd(device: str = "cpu", preset: str = "default") -> Target:
    """An inference target whose model is handed over as built: in training mode (its
    dropouts on), parameters requiring grad, the process's grad mode on. A forward of
    the user's own (no ``torch.no_grad()``) builds the autograd graph and keeps its
    saved activations."""
    return _inference(False, device=device)


def inference_clean(device: str = "cpu", preset: str = "default") -> Target:
    """The twin: the model in eval() and its parameters frozen, so that its own forward
    builds nothing."""
    return _inference(True, device=device)
