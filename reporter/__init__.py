"""reporter: turn a PyTorch profiling session into a report a person can act on."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["Target", "__version__"]


def __getattr__(name: str):
    # ``from reporter import Target`` for users' targets, without importing
    # the target registry (and later torch) for every other use of the package.
    if name == "Target":
        from .collect.target import Target
        return Target
    raise AttributeError(name)
