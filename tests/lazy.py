"""Heavy modules imported on first use, for test modules that need them only inside test
functions, so that collecting such a module costs nothing (torch takes about 1.5 s to import,
ml_dtypes about 0.9 s, transformers and its models seconds):

* ``from tests.lazy import torch`` binds ``torch`` at once and imports it when a test first
  touches ``torch.<anything>`` (:func:`ncdc.ir.lazy.lazy_module`; pytest's probing of a test
  module's globals while collecting imports nothing); likewise every name of :data:`LAZY`;
* ``from tests.lazy import F`` (or another name of :data:`DEFERRED`) binds a stand-in for a
  function, class or module inside torch that imports it on its first call or attribute access.
  A stand-in cannot be subclassed: a module-level class deriving from a torch class is
  defined inside a function decorated ``@Deferred``, which builds it on first use.
"""
from __future__ import annotations

import functools
import importlib
from types import ModuleType

from ncdc.ir.lazy import LazyModule, lazy_module

LAZY = ("torch", "ml_dtypes")
"""The modules this file gives by name (``from tests.lazy import NAME``)."""

DEFERRED = {
    "F": ("torch.nn.functional", None),
    "transformers": ("transformers", None),  # replaces its own module in sys.modules
    "functional_call": ("torch.func", "functional_call"),
    "FlopCounterMode": ("torch.utils.flop_counter", "FlopCounterMode"),
    "tree_flatten": ("torch.utils._pytree", "tree_flatten"),
    "profile": ("torch.profiler", "profile"),
}
"""name -> (module, attribute or None for the module itself) of the stand-ins this file gives."""


PYTEST_PROBES = ("_mock_name", "_pytestfixturefunction")
"""What pytest reads of every global of a test module it collects, besides dunders
(``__test__``, ``__wrapped__``): mock's name (pytest 7-9) and the fixture marker (pytest 9)."""


class Collectable(LazyModule):
    """A lazy module that answers itself what pytest asks of every global of a test module it
    collects: dunders (as every :class:`LazyModule`) and :data:`PYTEST_PROBES` (as absent)."""

    def __getattr__(self, name: str):
        if name in PYTEST_PROBES:
            raise AttributeError(name)
        return super().__getattr__(name)


def lazy(name: str) -> ModuleType:
    """The module ``name``, imported on first use (:class:`Collectable`): for a module that
    only some tests need, ``S = lazy("ncdc.codegen.prelude.storage")``."""
    return lazy_module(name, Collectable)


class Deferred:
    """A stand-in for what ``build()`` returns, built on first use (a call or an attribute), once.

    As a decorator it defers a class that derives from a torch class: ``@Deferred`` over a
    function that defines the class and returns it; calling the stand-in constructs an instance.
    """

    def __init__(self, build):
        self._build = build
        self._target = None

    def resolve(self):
        """The object stood in for, built now if it was not yet."""
        if self._target is None:
            self._target = self._build()
        return self._target

    def __call__(self, *args, **kwargs):
        return self.resolve()(*args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__") or name in PYTEST_PROBES:
            raise AttributeError(name)
        return getattr(self.resolve(), name)


def _imported(module: str, attribute: str | None):
    target = importlib.import_module(module)
    return target if attribute is None else getattr(target, attribute)


def __getattr__(name: str) -> ModuleType | Deferred:
    if name in LAZY:
        return lazy(name)
    if name in DEFERRED:
        return Deferred(functools.partial(_imported, *DEFERRED[name]))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
