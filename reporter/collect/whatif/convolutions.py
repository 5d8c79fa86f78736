"""The convolutions' what-ifs on the model's step: a convolution's bias before batch norm
dropped, cuDNN's auto-tuner on, and the channels-last layout."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

from .precision import tensors_mapped
from .steps import _in_mode, _patchable, fixed_step


def conv_bias_pairs(step: Any) -> list[Any]:
    """The convolution modules (nn.Conv1d/2d/3d with a bias) whose output one step of the
    model hands straight to a BatchNorm module: hooks see each convolution's output and
    each BatchNorm's input, which are the same tensor where one feeds the other."""
    from torch import nn

    model = step.target.model
    convs = [m for m in model.modules() if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
             and getattr(m, "bias", None) is not None]
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not convs or not norms:
        return []
    made: dict[int, tuple[Any, Any]] = {}  # id(output): (conv, output), kept alive
    found: list[Any] = []

    def conv_out(m: Any, args: Any, out: Any) -> None:
        made[id(out)] = (m, out)

    def norm_in(m: Any, args: Any) -> None:
        conv = made.get(id(args[0])) if args else None
        if conv is not None and conv[1] is args[0] and conv[0] not in found:
            found.append(conv[0])
    hooks = [c.register_forward_hook(conv_out) for c in convs]
    hooks += [n.register_forward_pre_hook(norm_in) for n in norms]
    try:
        with _in_mode(step):
            step()
    finally:
        for h in hooks:
            h.remove()
        made.clear()
    return found


@contextlib.contextmanager
def conv_bias_off(convs: Sequence[Any]) -> Iterator[None]:
    """The convolutions ``convs`` without their bias inside the block (``bias=None``, as a
    model built with ``bias=False`` has them), their bias put back after."""
    saved = [(m, m.bias) for m in convs]
    try:
        for m, _ in saved:
            m.bias = None
        yield
    finally:
        for m, bias in saved:
            m.bias = bias


def conv_bias_step(section: Any, device: str, step: Any) -> dict[str, Any] | None:
    """The model's training step with the bias of each convolution that feeds a
    BatchNorm taken away (``conv_bias_off``) and as it is, in turn (``fixed_step``), with
    how many convolutions that was ("convs"). None outside training (BatchNorm then
    uses its running statistics, which the bias is part of), for a compiled model, or
    where no such convolution is found on the model (a functional convolution, say)."""
    if section.label != "train" or not _patchable(step):
        return None
    convs = conv_bias_pairs(step)
    if not convs:
        return None
    return {**fixed_step(device, step, lambda: conv_bias_off(convs), "conv-bias-off"),
            "convs": len(convs)}


# Steps run with the auto-tuner on before the timing: the first call of each shape times
# cuDNN's algorithms (the cache is the process's, kept after the flag goes off again).
BENCHMARK_WARMUP = 3


@contextlib.contextmanager
def cudnn_benchmark_on() -> Iterator[None]:
    """``torch.backends.cudnn.benchmark`` on inside the block, as it was after."""
    import torch

    was = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = was


def cudnn_benchmark_step(device: str, step: Any) -> dict[str, Any] | None:
    """The model's step with cuDNN's auto-tuner on (``cudnn_benchmark_on``) and as it is,
    in turn (``fixed_step``), after ``BENCHMARK_WARMUP`` steps with it on, which run the
    auto-tuner for each shape. None off a CUDA device (no cuDNN) or for a compiled model.
    To be verified on a GPU: written and tested on the CPU only."""
    from ...model.device import cuda_api

    if not cuda_api(device) or not _patchable(step):
        return None
    with _in_mode(step), cudnn_benchmark_on():
        for _ in range(BENCHMARK_WARMUP):
            step()
    return fixed_step(device, step, cudnn_benchmark_on, "cudnn-benchmark")


@contextlib.contextmanager
def channels_last_on(step: Any) -> Iterator[None]:
    """The model's 4-D parameters and buffers and each batch's 4-D tensors in
    ``torch.channels_last`` inside the block (``_Stepper.cast``), as a user who follows
    channels-last's advice has them; the tensors' own data and the cast put back after
    (the parameters' gradients are dropped: the next step makes them)."""
    import torch

    last = torch.channels_last
    model = step.target.model
    saved: list[tuple[Any, Any]] = []
    for t in [*model.parameters(), *model.buffers()]:
        if t.dim() == 4:
            saved.append((t, t.data))
            t.data = t.data.contiguous(memory_format=last)
    cast = getattr(step, "cast", None)

    def to_last(batch: Any) -> Any:
        batch = cast(batch) if cast is not None else batch
        return tensors_mapped(batch, lambda t: t.contiguous(memory_format=last)
                              if t.dim() == 4 else t)
    step.cast = to_last
    try:
        yield
    finally:
        step.cast = cast
        for t, data in saved:
            t.data = data
            if isinstance(t, torch.nn.Parameter):
                t.grad = None


def channels_last_step(device: str, step: Any) -> dict[str, Any] | None:
    """The model's step in ``torch.channels_last`` (``channels_last_on``) and as it is, in
    turn (``fixed_step``). None for a compiled model. To be verified on a GPU: written
    and tested on the CPU only."""
    if not _patchable(step):
        return None
    return fixed_step(device, step, lambda: channels_last_on(step), "nhwc-layout")
