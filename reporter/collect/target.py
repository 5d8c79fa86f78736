"""What a target is, and how a target spec on the command line is resolved.

A target is a function ``build(device: str, preset: str) -> Target``. Built-in
targets live in ``reporter.collect.targets``; a user's own target is named
``module:function`` or ``path/to/file.py:function``. This module imports torch
only when a target is built.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import BadInput, user_code

PRESETS = ("tiny", "default", "large")


@dataclass
class Target:
    """A model, a way to make batches, and what one step does.

    The runner drives the step: it takes the next batch from ``batches`` (a
    DataLoader or any iterable; restarted when exhausted), moves its tensors to
    the device, and runs ``forward`` (default ``model(batch[0])``), ``loss``
    (``loss(output, batch) -> scalar tensor``), ``backward`` and the
    ``optimizer`` step, each inside a ``record_function`` mark. Without a loss
    the step is inference only.
    """

    model: Any
    batches: Iterable
    batch_size: int
    loss: Callable[[Any, Any], Any] | None = None
    optimizer: Any | None = None
    forward: Callable[[Any, Any], Any] | None = None
    # Which steps to profile: "train" needs a loss and an optimizer.
    modes: tuple[str, ...] = ("train",)
    non_blocking: bool = False  # host-to-device copies with non_blocking=True
    autocast: str | None = None  # "bf16" or "fp16": autocast around forward and loss
    tf32: bool = False  # allow TF32 matmuls and convolutions while this target runs
    # Optional side benchmark: device -> [(operation key, milliseconds)].
    benchmark: Callable[[str], list[tuple[str, float]]] | None = None

    def check(self, spec: str) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size <= 0:
            raise BadInput(f"target {spec}: batch_size must be a positive int, "
                           f"got {self.batch_size!r}", error_id="bad-target")
        for mode in self.modes:
            if mode not in ("train", "inference"):
                raise BadInput(f"target {spec}: unknown mode {mode!r} "
                               "(use 'train' or 'inference')", error_id="bad-target")
        if self.autocast not in (None, "bf16", "fp16"):
            raise BadInput(f"target {spec}: autocast must be 'bf16', 'fp16' or None, got "
                           f"{self.autocast!r}", error_id="bad-target")
        if "train" in self.modes and (self.loss is None or self.optimizer is None):
            raise BadInput(f"target {spec}: mode 'train' needs a loss and an optimizer",
                           error_id="bad-target")


@dataclass(frozen=True)
class BuiltinTarget:
    name: str
    module: str  # module under reporter.collect.targets holding the builder
    function: str
    seed: str  # which seed report it reproduces
    summary: dict[str, str]  # one line per language: what it reproduces

    def builder(self) -> Callable[..., Target]:
        mod = importlib.import_module(f"reporter.collect.targets.{self.module}")
        return getattr(mod, self.function)


def _b(name, module, function, seed, en, ru, zh):
    return BuiltinTarget(name, module, function, seed, {"en": en, "ru": ru, "zh": zh})


BUILTINS: dict[str, BuiltinTarget] = {t.name: t for t in [
    _b("seq2seq", "seq2seq", "baseline", "000",
       "RNN encoder-decoder, teacher forcing by a Python loop writing each step into a "
       "preallocated tensor (CopySlices, aten::copy_); pad_sequence on the CPU",
       "RNN энкодер-декодер, teacher forcing циклом на Python с записью каждого шага в "
       "заранее выделенный тензор (CopySlices, aten::copy_); pad_sequence на CPU",
       "RNN 编码器-解码器，用 Python 循环逐步做 teacher forcing，"
       "每步切片写入预分配张量（CopySlices、aten::copy_）；pad_sequence 在 CPU 上"),
    _b("seq2seq-fixed", "seq2seq", "fixed", "000",
       "the same model decoding the whole teacher-forced sequence in one call",
       "та же модель, весь teacher-forced декодинг одним вызовом",
       "同一模型，一次调用解码整个 teacher forcing 序列"),
    _b("transformer-bloat", "bloat", "baseline", "001",
       "transformer block whose mixing layer materialises huge tensors with "
       "repeat/permute/expand, then multiplies and sums them (aten::mul, aten::copy_)",
       "трансформер, у которого слой смешивания раздувает тензоры через "
       "repeat/permute/expand, а потом перемножает и суммирует их (aten::mul, aten::copy_)",
       "Transformer 块的混合层用 repeat/permute/expand 生成巨大张量再相乘求和"
       "（aten::mul、aten::copy_）"),
    _b("transformer-bloat-fixed", "bloat", "fixed", "001",
       "the same function with matmul/einsum and broadcasting",
       "та же функция через matmul/einsum и broadcasting",
       "用 matmul/einsum 和广播计算同一函数"),
    _b("cnn", "cnn", "baseline", "002",
       "conv/batch-norm/ReLU/max-pool CNN fed by a DataLoader with a heavy per-sample "
       "CPU transform, num_workers=0, pageable memory",
       "CNN (conv/batch-norm/ReLU/max-pool), DataLoader с тяжёлым CPU-преобразованием "
       "каждого примера, num_workers=0, pageable-память",
       "CNN（conv/batch-norm/ReLU/max-pool），DataLoader 对每个样本做繁重的 CPU 变换，"
       "num_workers=0，可分页内存"),
    _b("cnn-fixed", "cnn", "fixed", "002",
       "the same CNN: the augmentation computed once up front, then DataLoader workers, "
       "pin_memory and non_blocking copies",
       "та же CNN: аугментация посчитана один раз заранее, дальше воркеры DataLoader, "
       "pin_memory и non_blocking-копирование",
       "同一 CNN：数据增强预先计算一次，再使用 DataLoader 多进程、pin_memory 和 "
       "non_blocking 拷贝"),
    _b("tensor-ops", "tensor_ops", "build", "003",
       "matmul, element-wise add and mul, transpose and a full sum on large tensors, "
       "timed on CPU and GPU with synchronisation and warm-up",
       "matmul, поэлементные add и mul, транспонирование и полная сумма на больших "
       "тензорах; замеры на CPU и GPU с синхронизацией и прогревом",
       "大张量上的 matmul、逐元素 add 和 mul、转置与全量求和，"
       "在 CPU 和 GPU 上计时（含同步与预热）"),
    _b("transformer", "transformer", "baseline", "004",
       "encoder-decoder transformer in fp32 with hand-written attention "
       "(bmm + softmax), profiled in a training step and in inference",
       "трансформер энкодер-декодер в fp32 с вручную написанным attention "
       "(bmm + softmax), профилирование шага обучения и инференса",
       "fp32 编码器-解码器 Transformer，手写注意力（bmm + softmax），"
       "分别分析训练步与推理"),
    _b("transformer-fixed", "transformer", "fixed", "004",
       "the same transformer with bf16 autocast (TF32 where bf16 does not apply) and "
       "scaled_dot_product_attention",
       "тот же трансформер с bf16 autocast (TF32, где bf16 неприменим) и "
       "scaled_dot_product_attention",
       "同一 Transformer，使用 bf16 autocast（不适用时用 TF32）和 "
       "scaled_dot_product_attention"),
]}

BUILTINS["ddp"] = _b(
    "ddp", "ddp", "build", "—",
    "a model trained with DistributedDataParallel on several ranks (gloo on the CPU, NCCL on "
    "GPUs): communication per rank; run with --nproc 2",
    "модель, обучаемая через DistributedDataParallel на нескольких рангах (gloo на CPU, NCCL на "
    "GPU): коммуникация по рангам; запуск с --nproc 2",
    "在多个 rank 上用 DistributedDataParallel 训练的模型（CPU 用 gloo，GPU 用 NCCL）："
    "各 rank 的通信；用 --nproc 2 运行")

# The default suite: the seed workloads (ddp needs several ranks).
DEFAULT_SUITE = tuple(name for name in BUILTINS if name != "ddp")


def resolve(spec: str) -> tuple[str, Callable[..., Target]]:
    """Turn a target spec into (display name, builder). Raises BadInput."""
    if spec in BUILTINS:
        return spec, BUILTINS[spec].builder()
    if ":" not in spec:
        known = ", ".join(BUILTINS)
        raise BadInput(f"unknown target {spec!r}; built-in targets: {known}; "
                       "or name your own as module:function or path/to/file.py:function",
                       error_id="unknown-target")
    where, _, func_name = spec.rpartition(":")
    if not where or not func_name.isidentifier():
        raise BadInput(f"target {spec!r}: expected module:function or file.py:function",
                       error_id="unknown-target")
    module = _import_user_module(spec, where)
    func = getattr(module, func_name, None)
    if func is None:
        raise BadInput(f"target {spec!r}: {where} has no attribute {func_name!r}",
                       error_id="bad-target")
    if not callable(func):
        raise BadInput(f"target {spec!r}: {func_name} is not callable", error_id="bad-target")
    return spec, func


def _import_user_module(spec: str, where: str):
    with user_code(f"target {spec!r}: cannot import {where}", BadInput, "bad-target"):
        return _import(spec, where)


def _import(spec: str, where: str):
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where)
        if not path.is_file():
            raise BadInput(f"target {spec!r}: no such file {where}", error_id="bad-target")
        name = f"reporter_user_target_{abs(hash(str(path.resolve())))}"
        loader_spec = importlib.util.spec_from_file_location(name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise BadInput(f"target {spec!r}: cannot import {where}", error_id="bad-target")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module  # dataclasses and pickling need it registered
        loader_spec.loader.exec_module(module)
        return module
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    return importlib.import_module(where)


def build(spec: str, builder: Callable[..., Target], device: str, preset: str) -> Target:
    """Call a builder with the keyword arguments it accepts; check what it returns."""
    try:
        params = inspect.signature(builder).parameters
    except (TypeError, ValueError):
        params = {}
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in (("device", device), ("preset", preset))
              if accepts_any or k in params}
    target = builder(**kwargs)
    if not isinstance(target, Target):
        raise BadInput(f"target {spec!r} returned {type(target).__name__}, "
                       "expected reporter.Target", error_id="bad-target")
    target.check(spec)
    return target
