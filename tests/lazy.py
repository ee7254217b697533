"""Heavy modules imported on first attribute access, for test modules that need them only inside
test functions: ``from tests.lazy import torch`` binds ``torch`` at once and loads it when a test
first touches ``torch.<anything>``, so collecting such a module costs nothing (torch takes about
1.5 s to import, ml_dtypes about 0.9 s).

A module already imported is returned as it is. A lazily loaded module is entered in
``sys.modules`` under its own name, so a later ``import torch`` anywhere gets the same object
(and loads it, as any attribute access does): there is one module, loaded once.
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

LAZY = ("torch", "ml_dtypes")
"""The modules this file gives by name (``from tests.lazy import NAME``)."""


def lazy(name: str) -> ModuleType:
    """``name`` as a module loaded on first attribute access (:class:`importlib.util.LazyLoader`);
    the module itself when it is imported already."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def __getattr__(name: str) -> ModuleType:
    if name in LAZY:
        return lazy(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
