"""Bottom-up rebuilding of a term: :func:`rebuild`, the one mechanism every IR -> IR pass
(:mod:`ir.pipeline`) uses.

Every ``Morphism`` and ``Operator`` below the root is visited once (memoised by identity, so a
term shared by several sites is rebuilt once and stays shared); a node whose fields do not
change is kept as it is (no copy); ``rule(node)`` then maps the node, its children already
rebuilt, to its replacement (or to itself). ``path`` fields and fields that are not
constructor arguments are never visited.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .morphisms import Morphism
from .operators import Operator


def rebuild(term, rule: Callable, sources: list | None = None):
    """``term`` with ``rule`` applied to every morphism and operator, children first; each
    ``(new node, the node it replaces)`` appended to ``sources`` where given."""
    return _Rebuild(rule, sources).term(term)


class _Rebuild:
    def __init__(self, rule, sources=None):
        self.rule = rule
        self.sources = sources
        self.memo: dict[int, object] = {}
        self.keep: list = []
        """The visited terms: alive while ``memo`` is, so no id is recycled meanwhile."""

    def term(self, t):
        if not isinstance(t, _VISITED):  # numbers, strings, weaves, axes: never rebuilt
            return t
        key = id(t)
        if key in self.memo:
            return self.memo[key]
        out = self._rebuild(t)
        self.memo[key] = out
        self.keep.append(t)
        if out is not t and self.sources is not None and isinstance(t, (Morphism, Operator)):
            self.sources.append((out, t))
        return out

    def _rebuild(self, t):
        if isinstance(t, tuple):
            items = tuple(map(self.term, t))
            for a, b in zip(items, t, strict=True):
                if a is not b:
                    return items
            return t
        if isinstance(t, dict):  # a Truncated term's recovered fields
            items = {k: self.term(v) for k, v in t.items()}
            return t if all(items[k] is v for k, v in t.items()) else items
        names = _fields(type(t))
        if names is None:
            return t
        changes = {}
        for name in names:
            val = getattr(t, name)
            if isinstance(val, _VISITED):
                new = self.term(val)
                if new is not val:
                    changes[name] = new
        out = dataclasses.replace(t, **changes) if changes else t
        return self.rule(out)


_VISITED = (Morphism, Operator, tuple, dict)

_FIELDS: dict[type, tuple[str, ...] | None] = {}
"""class -> the fields :class:`_Rebuild` visits (constructor arguments but ``path``), None for a
class that is not a dataclass ``Morphism`` or ``Operator``."""


def _fields(cls: type) -> tuple[str, ...] | None:
    try:
        return _FIELDS[cls]
    except KeyError:
        pass
    names = None
    if issubclass(cls, (Morphism, Operator)) and dataclasses.is_dataclass(cls):
        names = tuple(f.name for f in dataclasses.fields(cls) if f.name != "path" and f.init)
    _FIELDS[cls] = names
    return names


__all__ = ["rebuild"]
