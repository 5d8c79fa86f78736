"""transformer-compiled: the fixed transformer (seed 004) under ``torch.compile``.

The same model, batches and step as ``transformer-fixed``, its model compiled with
Inductor (its C++ backend on the CPU, Triton on a GPU). The runner's warm-up pays the
compilation; the profile then shows the compiled regions, Dynamo's guard checks and the
kernels Inductor generated, which the report attributes (reporter.analyze.compiled).
On the CPU, Inductor's C++ kernels are recorded by name only with
``torch._inductor.config.cpp.enable_kernel_profile``, which this target sets.

Inductor compiles C++ (and, on a GPU, Triton's launcher) with the machine's compiler:
without one the target stops with one line saying what to install.
"""

from __future__ import annotations

import os
import shutil

import torch

from ...errors import WorkFailed
from ..target import Target
from . import transformer


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def build(device: str = "cpu", preset: str = "default") -> Target:
    if _compiler() is None:
        raise WorkFailed("transformer-compiled: torch.compile needs a C++ compiler (g++ or "
                         "clang++) and none is on PATH; install one (apt-get install g++) "
                         "or set CXX", error_id="install")
    import torch._inductor.config as inductor

    inductor.cpp.enable_kernel_profile = True  # name the C++ kernels in the profile
    target = transformer.fixed(device, preset)
    target.model = torch.compile(target.model)
    return target
