"""What a rule reads and returns: operands read through their reindexings, labelled results.

Dims are tracked by *labels*: ``("d", i)`` is degree dim ``i``, ``("t", k, p)`` target position
``p`` of input ``k``, ``("o", j, p)`` target position ``p`` of output ``j`` (``("v", i)``: the
degree of a fused view, ``("g", n)``: an Einops group, ``("p",)``: the pairs dim).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Operand:
    """Input ``k`` of a Broadcasted after its reindexing: trailing dims labelled."""

    expr: str
    labels: list
    live: str | None
    static: tuple | None  # (possible, sure) arrays, dims in label order
    full: bool
    datatype: object
    flipped: frozenset = frozenset()  # labels of dims held in reverse order (codegen/flips.py)
    imag: str | None = None  # the imaginary part of a complex value held as real parts
    dead: str = "0"  # what dead positions hold (codegen.wires.Wire.dead)


@dataclass
class OpResult:
    expr: str
    labels: list
    live: str | None = None
    static: tuple | None = None
    full: bool | None = None
    slot: int | None = None  # the value is this tape slot's, unchanged
    imag: str | None = None  # the imaginary part of a complex value held as real parts
    dead: str = "0"  # what dead positions hold (codegen.wires.Wire.dead)
