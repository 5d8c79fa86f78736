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
from typing import Any, Callable, Iterable, Mapping

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
    # Optional: the advice applied to the model, by finding id (as --json names them): a
    # function returning a context manager inside which the step runs with that fix.
    # Where the finding fires, the runner times the step with and without it, in turn,
    # and the report gives the share it saved (reporter.collect.whatif.fixed_step).
    fixes: Mapping[str, Callable[[], Any]] | None = None

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
        if self.fixes is not None:
            from .. import analyze  # noqa: F401  (registers the rules)
            from ..analyze.findings import RULES

            if not isinstance(self.fixes, Mapping):
                raise BadInput(f"target {spec}: fixes must map finding ids to functions, "
                               f"got {type(self.fixes).__name__}", error_id="bad-target")
            for rule_id, fix in self.fixes.items():
                if rule_id not in RULES or RULES[rule_id].func is None:
                    raise BadInput(f"target {spec}: fixes names {str(rule_id)[:60]!r}, not a "
                                   f"finding reporter makes (one of: "
                                   f"{', '.join(sorted(r for r, x in RULES.items() if x.func))})",
                                   error_id="bad-target")
                if not callable(fix):
                    raise BadInput(f"target {spec}: fixes[{rule_id!r}] must be a function "
                                   "returning a context manager", error_id="bad-target")


@dataclass(frozen=True)
class BuiltinTarget:
    """A built-in target. What it reproduces is told in each language's templates
    (``targets.j2``), like every other word a user reads."""

    name: str
    module: str  # module under reporter.collect.targets holding the builder
    function: str
    seed: str  # which seed report it reproduces ("—": none)

    def builder(self) -> Callable[..., Target]:
        mod = importlib.import_module(f"reporter.collect.targets.{self.module}")
        return getattr(mod, self.function)


BUILTINS: dict[str, BuiltinTarget] = {t.name: t for t in [
    BuiltinTarget("seq2seq", "seq2seq", "baseline", "000"),
    BuiltinTarget("seq2seq-fixed", "seq2seq", "fixed", "000"),
    BuiltinTarget("transformer-bloat", "bloat", "baseline", "001"),
    BuiltinTarget("transformer-bloat-fixed", "bloat", "fixed", "001"),
    BuiltinTarget("cnn", "cnn", "baseline", "002"),
    BuiltinTarget("cnn-fixed", "cnn", "fixed", "002"),
    BuiltinTarget("tensor-ops", "tensor_ops", "build", "003"),
    BuiltinTarget("transformer", "transformer", "baseline", "004"),
    BuiltinTarget("transformer-fixed", "transformer", "fixed", "004"),
    BuiltinTarget("transformer-compiled", "compiled", "build", "004"),
    BuiltinTarget("ddp", "ddp", "build", "—"),  # needs several ranks: --nproc 2
]}

# The default suite: the seed workloads. Not ddp, which needs several ranks, nor
# transformer-compiled, whose compilation alone takes longer than the suite.
DEFAULT_SUITE = tuple(name for name in BUILTINS if name not in ("ddp", "transformer-compiled"))


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
    params: Mapping[str, inspect.Parameter]
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
