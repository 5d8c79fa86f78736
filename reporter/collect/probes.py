"""What the target's own code does that the runner observes before it times it: the
modules' training modes, and the grad mode and anomaly detection in effect in its forward
(_observe, _probe_inference)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from .inductor import compiled_model
from .stepper import _Stepper
from .whatif import tensors_mapped


# Modules whose forward changes with their training mode: dropout and batch norm.
_MODE_LAYERS = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._NormBase)


def _modes(model: Any) -> list[tuple[Any, bool]] | None:
    """Each module of ``model`` and its training mode (None: not an nn.Module)."""
    if not isinstance(model, torch.nn.Module):
        return None
    return [(m, m.training) for m in model.modules()]


@contextlib.contextmanager
def _in_modes(modes: list[tuple[Any, bool]] | None):
    """The modules in the given modes inside the block, each put back after."""
    now = [(m, m.training) for m, _ in modes or []]
    for m, training in modes or []:
        m.training = training
    try:
        yield
    finally:
        for m, training in now:
            m.training = training


def _state_seen() -> tuple[Callable[[], None], dict[str, bool]]:
    """A global forward pre-hook that notes, at the first module call it sees, the grad
    mode and anomaly detection in effect there (inside the target's own forward, where a
    ``with detect_anomaly():`` of its own is in effect); returns its remover and the
    notes."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    seen: dict[str, bool] = {}

    def note(module: Any, args: Any) -> None:
        if not seen:
            seen.update(grad_enabled=torch.is_grad_enabled(),
                        anomaly=torch.is_anomaly_enabled())
    return register_module_forward_pre_hook(note).remove, seen


def _observe(stepper: "_Stepper", threads_set: bool) -> dict[str, Any]:
    """The process state around one step of ``stepper`` as the runner runs it (the
    step runs here: the warm-up's last), and what the runner set itself (run.Section.process):
    for a training step the grad mode seen inside it, anomaly detection (set for the
    process or entered inside the step), cuDNN's auto-tuner, deterministic algorithms,
    the default dtype and torch's threads."""
    anomaly = torch.is_anomaly_enabled()
    remove, seen = _state_seen()
    try:
        stepper()
    finally:
        remove()
    process: dict[str, Any] = {
        "anomaly": bool(anomaly or seen.get("anomaly") or torch.is_anomaly_enabled()),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        "default_dtype": str(torch.get_default_dtype()).removeprefix("torch."),
        "threads": torch.get_num_threads(), "runner_threads": threads_set,
        "runner_inference_mode": stepper.mode == "inference",
        "runner_eval": stepper.mode == "inference" and hasattr(stepper.target.model, "train")}
    if stepper.mode == "train" and "grad_enabled" in seen:
        process["grad_enabled"] = seen["grad_enabled"]
    return process


def _probe_inference(stepper: "_Stepper") -> dict[str, Any]:
    """One forward of an inference-only target as the user's own code would run it: the
    process's grad mode, the model's modules in the modes the target handed them over in
    (``as_built``), no inference_mode or eval() of the runner's. What it found: the grad
    mode in the forward, the modules in training mode (and those of dropout and batch norm
    among them), whether its output holds an autograd graph, and the bytes of the
    activations that graph saved for backward (torch.autograd.graph.saved_tensors_hooks;
    each storage once, the model's own parameters and buffers left out). Empty for a
    model that is not an nn.Module, or a compiled one."""
    model, built = stepper.target.model, stepper.as_built
    if built is None or compiled_model(model):
        return {}  # a compiled model would compile again for the other grad mode
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    saved: dict[int, int] = {}

    def pack(t: Any) -> Any:
        try:
            storage = t.untyped_storage()
            if storage.data_ptr() not in own:
                saved[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, TypeError, AttributeError):
            pass  # a tensor without storage (a subclass, a meta tensor)
        return t

    batch = stepper.load()
    remove, seen = _state_seen()
    graph = [False]
    try:
        with _in_modes(built), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = stepper.forward_as_user(batch)

            def note(t: torch.Tensor) -> torch.Tensor:
                graph[0] = graph[0] or t.grad_fn is not None
                return t
            tensors_mapped(out, note)
            if not isinstance(out, (torch.Tensor, list, tuple, dict)):  # a ModelOutput
                for value in getattr(out, "values", lambda: [])():
                    tensors_mapped(value, note)
            del out
    finally:
        remove()
    return {"grad_enabled": seen.get("grad_enabled", torch.is_grad_enabled()),
            "training_modules": sum(training for _, training in built),
            "training_layers": sum(training for m, training in built
                                   if isinstance(m, _MODE_LAYERS)),
            "probe_grad_fn": graph[0], "probe_saved_b": sum(saved.values())}
