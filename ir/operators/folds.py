"""Sums of wires and folds over one axis."""
from __future__ import annotations

from dataclasses import dataclass

from ..frozen import quick_init
from .base import Operator
from .measure import has_complex, in_work, out_work


@quick_init
@dataclass(frozen=True, eq=False)
class AdditionOp(Operator):
    """Pointwise sum of the operands; a dead operand counts as 0 (dead only if all are)."""

    part_of_fma: bool = False

    glyph = "+"
    family = "fold"

    def check(self, site):
        """At least one operand, one result, every slot TILED."""
        if site.arity(min_in=1, n_out=1):
            site.all_tiled()

    def flops(self, b):
        """``n - 1`` per element (complex: 2 each)."""
        add = 2 if has_complex(b) else 1
        return max(len(b.input_weaves) - 1, 0) * add * out_work(b)


class _Fold(Operator):
    """One operand with one target axis, one rank-0 result."""

    def check(self, site):
        _fold_shape(site)

    def flops(self, b):
        """1 per input element."""
        return in_work(b)


def _fold_shape(site) -> bool:
    if not site.arity(n_in=1, n_out=1):
        return False
    site.rank("input", 0, 1, "one target axis")
    site.rank("output", 0, 0, "a rank-0 result")
    return True


@quick_init
@dataclass(frozen=True, eq=False)
class Maximum(_Fold):
    """Max over the one target axis (live terms only)."""

    glyph = "max"
    family = "fold"


@quick_init
@dataclass(frozen=True, eq=False)
class BitwiseXor(_Fold):
    """XOR of the live naturals along the one target axis (identity 0)."""

    glyph = "⊕ xor"
    family = "fold"

    def check(self, site):
        """A fold over naturals."""
        if _fold_shape(site):
            site.kind_is(0, "natural")


@quick_init
@dataclass(frozen=True, eq=False)
class Modulo(Operator):
    """``a mod b`` of two rank-0 naturals."""

    glyph = "mod"
    family = "fold"

    def check(self, site):
        """Two operands, one result, every slot TILED."""
        if site.arity(n_in=2, n_out=1):
            site.all_tiled()

    def flops(self, b):
        """1 per element."""
        return out_work(b)


__all__ = ["AdditionOp", "BitwiseXor", "Maximum", "Modulo"]
