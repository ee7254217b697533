"""A heavy module bound at once and imported on first use: ``torch = lazy_module("torch")`` at
the top of a module that needs torch only inside its functions keeps importing that module cheap
(torch takes about 1.5 s to import).

Until then the name holds a stand-in (:class:`LazyModule`) whose dunder attributes are its own,
an empty module's: probing it (``isinstance``, ``__class__``, ``__name__``) imports nothing. Reading, setting or
deleting any other attribute, or its ``__dict__``, imports the module and acts on it, so
``torch.float64`` and ``monkeypatch.setattr(torch, ...)`` reach the real module; ``sys.modules`` holds only the real
one, imported once. A module already imported is returned as it is.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType


class LazyModule(ModuleType):
    """Stands for the module named ``__name__``; imports it on first use of an attribute that is
    not a dunder."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(importlib.import_module(self.__name__), name)

    def __setattr__(self, name: str, value) -> None:
        setattr(importlib.import_module(self.__name__), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(importlib.import_module(self.__name__), name)

    def __dir__(self):
        return dir(importlib.import_module(self.__name__))

    @property
    def __dict__(self):  # what ``vars`` and pytest's monkeypatch read and restore
        return vars(importlib.import_module(self.__name__))


def lazy_module(name: str, kind: type[LazyModule] = LazyModule) -> ModuleType:
    """The module ``name`` when it is imported already, else a ``kind`` (:class:`LazyModule`)
    for it (ModuleNotFoundError at once when it is not installed)."""
    if name in sys.modules:
        return sys.modules[name]
    if importlib.util.find_spec(name) is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return kind(name)
