"""Operators of the older pyncd generation."""
from __future__ import annotations

from dataclasses import dataclass

from ..frozen import quick_init
from .base import Operator
from .measure import in_work


@quick_init
@dataclass(frozen=True, eq=False)
class WeightedTriangularLower(Operator):
    """(older generation) causal weighting of a square ``[x, x]`` target; see the interpreter
    rule for the numerical reading."""

    glyph = "causal Σ"
    family = "norm"

    def check(self, site):
        """One operand with a square (rank-2) target, one result."""
        if site.arity(n_in=1, n_out=1):
            site.rank("input", 0, 2, "a square target")

    def flops(self, b):
        """2 per element."""
        return 2 * in_work(b)


__all__ = ["WeightedTriangularLower"]
