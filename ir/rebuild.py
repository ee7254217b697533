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
            items = tuple(self.term(x) for x in t)
            return t if all(a is b for a, b in zip(items, t, strict=True)) else items
        if isinstance(t, dict):  # a Truncated term's recovered fields
            items = {k: self.term(v) for k, v in t.items()}
            return t if all(items[k] is v for k, v in t.items()) else items
        if not isinstance(t, (Morphism, Operator)) or not dataclasses.is_dataclass(t):
            return t
        changes = {}
        for f in dataclasses.fields(t):
            if f.name == "path" or not f.init:
                continue
            val = getattr(t, f.name)
            if isinstance(val, (Morphism, Operator, tuple, dict)):
                new = self.term(val)
                if new is not val:
                    changes[f.name] = new
        out = dataclasses.replace(t, **changes) if changes else t
        return self.rule(out)


__all__ = ["rebuild"]
