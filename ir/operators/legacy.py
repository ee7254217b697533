"""Operators of the older pyncd generation."""
from __future__ import annotations

from dataclasses import dataclass

from .base import Operator


@dataclass(frozen=True, eq=False)
class WeightedTriangularLower(Operator):
    """(older generation) causal weighting of a square ``[x, x]`` target; see the interpreter
    rule for the numerical reading."""
