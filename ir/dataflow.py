"""A composition as a data-flow graph: leaf steps reading numbered wires, and back.

:func:`flatten` threads wire numbers through the structural kinds (``Composed``,
``ProductOfMorphisms``, ``Rearrangement``) of a morphism with :func:`ir.traverse.traverse`
and records every other node (a ``Broadcasted``, a ``Block``, a tape access) as one *step*
that reads wires and writes new ones. Wires ``0 .. n-1`` are the
morphism's inputs; each step's results get the next numbers. :func:`rebuild` turns such a graph
back into a plain composition of rearrangements and steps (the form
:class:`~ir.morphisms.ThreadedComposed` uses), equal to the original when nothing was changed.
Rewrites that span several operators (``ir/rewrites.py``) edit the graph in between.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .morphisms import (
    Block,
    Broadcasted,
    Composed,
    Drop,
    Grab,
    Morphism,
    ParaWrap,
    ProductOfMorphisms,
    Rearrangement,
    StrideMorphism,
    Truncated,
)
from .traverse import Visitor, traverse


@dataclass
class Dataflow:
    """``steps[i]`` reads the wires ``reads[i]`` and writes ``writes[i]``; ``types[w]`` is wire
    ``w``'s array; ``result`` the wires the morphism returns."""

    n_inputs: int
    types: list
    steps: list = field(default_factory=list)
    reads: list = field(default_factory=list)
    writes: list = field(default_factory=list)
    result: list = field(default_factory=list)

    def add(self, step: Morphism, reads) -> list[int]:
        start = len(self.types)
        self.types.extend(step.cod)
        self.steps.append(step)
        self.reads.append(list(reads))
        self.writes.append(list(range(start, len(self.types))))
        return self.writes[-1]

    def producer(self, wire: int) -> int | None:
        """The step writing ``wire`` (None for an input)."""
        for i, ws in enumerate(self.writes):
            if wire in ws:
                return i
        return None

    def readers(self, wire: int) -> list[int]:
        """Steps reading ``wire`` (once per read); -1 stands for the result."""
        out = [i for i, rs in enumerate(self.reads) for r in rs if r == wire]
        return out + [-1 for r in self.result if r == wire]


class _Steps(Visitor):
    """Wire values are wire numbers; every non-structural node is one step of ``g``."""

    leaves = (Block, Broadcasted, ParaWrap, Grab, Drop, Truncated, StrideMorphism)

    def __init__(self, g: Dataflow):
        self.g = g

    def leaf(self, m, ins, scope):
        return self.g.add(m, ins)

    unknown = leaf


def flatten(m: Morphism) -> Dataflow:
    """The data-flow graph of ``m`` (steps in evaluation order)."""
    g = Dataflow(len(m.dom), list(m.dom))
    g.result = traverse(m, list(range(len(m.dom))), _Steps(g))
    return g


def rebuild(g: Dataflow, path: str = "") -> Composed:
    """A plain composition computing ``g``: before each step the live wires are copied and the
    step's operands appended; the step runs beside the copies; the result is picked last.
    Wires no later step or the result reads are discarded as soon as possible."""
    last_use: dict[int, int] = {}
    for i, rs in enumerate(g.reads):
        for r in rs:
            last_use[r] = i
    content: list[Morphism] = []
    held = list(range(g.n_inputs))
    for i, (step, reads) in enumerate(zip(g.steps, g.reads, strict=True)):
        keep = [w for w in held if last_use.get(w, -1) > i or w in g.result]
        here = tuple(g.types[w] for w in held)
        content.append(Rearrangement(tuple(held.index(w) for w in keep + reads), here,
                                     path=path))
        kept = tuple(g.types[w] for w in keep)
        content.append(ProductOfMorphisms((Rearrangement(tuple(range(len(keep))), kept,
                                                         path=path), step), path=path))
        held = keep + g.writes[i]
    here = tuple(g.types[w] for w in held)
    content.append(Rearrangement(tuple(held.index(w) for w in g.result), here, path=path))
    return Composed(tuple(content), path=path)


__all__ = ["Dataflow", "flatten", "rebuild"]
