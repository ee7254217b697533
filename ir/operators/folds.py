"""Sums of wires and folds over one axis."""
from __future__ import annotations

from dataclasses import dataclass

from .base import Operator


@dataclass(frozen=True, eq=False)
class AdditionOp(Operator):
    """Pointwise sum of the operands; a dead operand counts as 0 (dead only if all are)."""

    part_of_fma: bool = False


@dataclass(frozen=True, eq=False)
class Maximum(Operator):
    """Max over the one target axis (live terms only)."""


@dataclass(frozen=True, eq=False)
class BitwiseXor(Operator):
    """XOR of the live naturals along the one target axis (identity 0)."""


@dataclass(frozen=True, eq=False)
class Modulo(Operator):
    """``a mod b`` of two rank-0 naturals."""
