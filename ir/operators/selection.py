"""Selections: top-k and what reads through a selection."""
from __future__ import annotations

import enum
from dataclasses import dataclass

import sympy

from ..frozen import quick_init
from .base import Operator
from .measure import ZERO, in_work, out_work


class SelectionForm(enum.Enum):
    WEIGHTS = "WEIGHTS"
    WEIGHTS_SELECT = "WEIGHTS_SELECT"
    ONLY_WEIGHTS = "ONLY_WEIGHTS"
    ONLY_SELECTION = "ONLY_SELECTION"


@quick_init
@dataclass(frozen=True, eq=False)
class TopK(Operator):
    """Keep the ``k`` largest live values of the one target axis (form WEIGHTS: in place, the
    rest dead)."""

    k: sympy.Expr = sympy.Integer(1)
    form: SelectionForm = SelectionForm.WEIGHTS

    glyph = "top-k"
    family = "topk"

    def check(self, site):
        """At least one operand; the first ranks along one target axis."""
        if site.arity(min_in=1):
            site.rank("input", 0, 1, "one target axis")

    def flops(self, b):
        """1 per input element."""
        return in_work(b)


@quick_init
@dataclass(frozen=True, eq=False)
class Select(Operator):
    """WEIGHTS form: ``out[j] = w[j] * p[j]`` at the live positions of the selection ``w``."""

    glyph = "select"
    family = "topk"

    def check(self, site):
        """Two operands (weights and payload, or positions and payload) or three (weights,
        positions, payload); one result."""
        site.arity(min_in=2, max_in=3, n_out=1)

    def flops(self, b):
        """1 per element."""
        return out_work(b)


@quick_init
@dataclass(frozen=True, eq=False)
class IndexSelect(Operator):
    """``payload[index]`` for a rank-0 natural index."""

    glyph = "index"
    family = "topk"

    def check(self, site):
        """A natural index and a payload, one result."""
        site.arity(n_in=2, n_out=1)

    def flops(self, b):
        """A lookup: 0."""
        return ZERO


__all__ = ["IndexSelect", "Select", "SelectionForm", "TopK"]
