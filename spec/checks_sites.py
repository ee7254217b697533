"""Every morphism occurrence of a spec, in both categories.

:func:`ir.walk.walk` visits the broadcasted-category terms (boxes' blocks included). Validation and
the block inventory also need the stride-category terms hanging off them: each ``Broadcasted``'s
reindexings and the index maps held by operators (``CovariantView.reindexing``,
``ConcatenateAxes``/``DeconcatenateAxes.part_reindexings``). :func:`all_sites` yields both, in
pre-order, each with its JSON path, the chain of enclosing block titles and its category.
"""
from __future__ import annotations

from ncdc.ir.morphisms import Block, Broadcasted, Morphism, Truncated
from ncdc.ir.operators import ConcatenateAxes, CovariantView, DeconcatenateAxes

BR, ST = "br", "st"
TRUNCATED_BLOCK = "(truncated block)"


class AnySite:
    """One occurrence of a morphism: its JSON path, the titles of the blocks around it (its own
    included when it is a block, as :func:`ir.walk.walk` does), its depth below the root and
    its category: ``br`` (arrays) or ``st`` (index maps)."""

    __slots__ = ("category", "depth", "node", "path", "titles")

    def __init__(self, node: Morphism, path: str, titles: tuple[str, ...], depth: int,
                 category: str):
        self.node, self.path, self.titles = node, path, titles
        self.depth, self.category = depth, category

    def __repr__(self):
        return f"AnySite({type(self.node).__name__} at {self.path}, {self.category})"


def held_index_maps(b: Broadcasted, path: str) -> list[tuple[str, Morphism]]:
    """The stride-category morphisms a Broadcasted holds, with their JSON paths."""
    out = [(f"{path}.reindexings[{k}]", rx) for k, rx in enumerate(b.reindexings)
           if isinstance(rx, Morphism)]
    op = b.operator
    if isinstance(op, CovariantView) and isinstance(op.reindexing, Morphism):
        out.append((f"{path}.operator.reindexing", op.reindexing))
    if isinstance(op, (ConcatenateAxes, DeconcatenateAxes)):
        out.extend((f"{path}.operator.part_reindexings[{i}]", p)
                   for i, p in enumerate(op.part_reindexings) if isinstance(p, Morphism))
    return out


def all_sites(root: Morphism, root_path: str | None = None):
    """Pre-order over every morphism below ``root``: broadcasted-category terms (as
    :func:`ir.walk.walk` visits them), each ``Broadcasted`` followed by the index maps it holds
    (and their sub-terms). Iterative; block titles are computed once per tag."""
    title_of: dict[int, str] = {}
    start = root.path if root_path is None else root_path  # type: ignore[attr-defined]  # on each subclass
    stack: list[tuple[Morphism, str, tuple[str, ...], int, str]] = [(root, start, (), 0, BR)]
    pop, push = stack.pop, stack.append
    while stack:
        node, path, chain, depth, cat = pop()
        if isinstance(node, Block):
            tag = node.tag
            t = title_of.get(id(tag))
            if t is None:
                t = title_of[id(tag)] = node.title
            chain = chain + (t,)
        elif isinstance(node, Truncated) and node.expected == "Block":
            chain = chain + (TRUNCATED_BLOCK,)
        yield AnySite(node, path, chain, depth, cat)
        for step, child in reversed(node.children()):
            push((child, path + step, chain, depth + 1, cat))
        if isinstance(node, Broadcasted):  # its index maps come next, before its box's block
            for p, rx in reversed(held_index_maps(node, path)):
                push((rx, p, chain, 0, ST))


__all__ = ["BR", "ST", "TRUNCATED_BLOCK", "AnySite", "all_sites", "held_index_maps"]
