"""Listing the sites of a morphism tree, with stable paths and the chain of enclosing titles.

Two mechanisms cover every walk over the IR: :func:`walk` lists each occurrence (a
:class:`Site`) in pre-order, for checks and reports that look at one node at a time; a
consumer that branches on the kind of node looks its handler up with :func:`by_kind` (a table
keyed by morphism class) instead of an ``isinstance`` chain. Whatever threads values along the
wires (evaluation, the wiring graph, the tape order) uses :func:`ir.traverse.traverse`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import SpecError
from .frozen import quick_init
from .morphisms import Block, Morphism, Truncated


@quick_init
@dataclass(frozen=True)
class Site:
    """One occurrence of a morphism: its JSON path and the titles of the blocks around it
    (including its own when it is a block)."""

    node: Morphism
    path: str
    titles: tuple[str, ...]
    depth: int

    @property
    def title(self) -> str | None:
        if isinstance(self.node, Block):
            return self.node.title
        return None


def walk(root: Morphism, root_path: str | None = None, titles: tuple[str, ...] = ()):
    """Pre-order over every Br morphism below ``root`` (boxes' blocks included, reindexings
    not). Iterative, so deep specs never hit the recursion limit."""
    start_path = getattr(root, "path", "") if root_path is None else root_path
    stack = [(root, start_path, titles, 0)]
    while stack:
        node, path, chain, depth = stack.pop()
        if isinstance(node, Block):
            chain = chain + (node.title,)
        elif isinstance(node, Truncated) and node.expected == "Block":
            chain = chain + ("(truncated block)",)
        yield Site(node, path, chain, depth)
        kids = node.children()
        for step, child in reversed(kids):
            stack.append((child, path + step, chain, depth + 1))


def arity(m: Morphism) -> int:
    """How many inputs ``m`` takes: ``len(m.dom)``; for a cut sequence, its first complete
    part's; 0 when it cannot be told."""
    try:
        return len(m.dom)
    except (SpecError, RecursionError):
        if isinstance(m, Truncated):
            content = m.partial.get("content") or ()
            first = next((x for x in content if isinstance(x, Morphism)), None)
            return arity(first) if first is not None and m.expected == "Composed" else 0
        return 0


def by_kind(table: dict, node: object, default=None):
    """The entry of ``table`` (keyed by class) for ``node``'s most derived class that has one
    (so a ``ThreadedComposed`` finds a ``Composed`` entry unless it has its own)."""
    for cls in type(node).__mro__:
        if cls in table:
            return table[cls]
    return default


def blocks(root: Morphism):
    """Every Block site below ``root`` in pre-order."""
    return [s for s in walk(root) if isinstance(s.node, Block)]
