"""Normalisations over the target axes."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..datatypes import Reals
from ..frozen import quick_init
from .base import Operator, need_weaves
from .measure import in_work


def _keeps_target(site) -> bool:
    """One operand, one result on the same target axes."""
    return site.arity(n_in=1, n_out=1) and site.same_target()


@quick_init
@dataclass(frozen=True, eq=False)
class Normalize(Operator):
    """RMSNorm over all target axes jointly: ``x (mean(x^2) + eps)^-1/2 (* gain) (+ bias)``.
    ``epsilon`` None means the older generation's field-less form (see the interpreter rule).
    ``centred`` (set only by the pyncd reading, ``ir.readings``) subtracts the mean first:
    LayerNorm."""

    gain: bool = False
    bias: bool = False
    epsilon: sympy.Expr | None = None
    centred: bool = False

    glyph = "RMSNorm"
    family = "norm"
    roles = ("gain", "shift")

    @property
    def shown(self) -> str:
        """``LayerNorm`` when the mean is subtracted first."""
        return "LayerNorm" if self.centred else self.glyph

    def check(self, site):
        """One operand, one result on the same target axes."""
        _keeps_target(site)

    def flops(self, b):
        """3 per element (square, accumulate, scale), +1 each for gain and bias, +3 per
        normalised group (mean, epsilon, reciprocal root)."""
        return (3 + int(self.gain) + int(self.bias)) * in_work(b) + 3

    def param_arrays(self, b):
        """``gain`` and ``shift`` over the input's target axes."""
        need_weaves(self, b, need_out=False)
        tgt = b.input_weaves[0].target
        shape, labels = tuple(a.size for a in tgt), tuple(a.label for a in tgt)
        out = []
        if self.gain:
            out.append(("gain", shape, labels, Reals(), True))
        if self.bias:
            out.append(("shift", shape, labels, Reals(), True))
        return out


@quick_init
@dataclass(frozen=True, eq=False)
class L2Norm(Operator):
    """``y = x / sqrt(sum x^2)`` over all target axes jointly (live positions only; a slice
    with no live position is dead): no epsilon, no learned gain. pyncd's ``L2Norm``."""

    glyph = "L2 norm"
    family = "norm"

    def check(self, site):
        """One real operand, one result on the same target axes."""
        if _keeps_target(site):
            site.kind_is(0, "real")

    def flops(self, b):
        """3 per element (square, accumulate, divide), +1 per normalised group (the root)."""
        return 3 * in_work(b) + 1


@quick_init
@dataclass(frozen=True, eq=False)
class L1Norm(Operator):
    """``y = x / (sum x + eps)`` over the single target axis."""

    contracted: bool = False
    epsilon: sympy.Expr = sympy.Integer(0)

    glyph = "L1 norm"
    family = "norm"

    def check(self, site):
        """One operand with one target axis, one result on the same axis."""
        if site.arity(n_in=1, n_out=1) and site.rank("input", 0, 1, "one target axis"):
            site.same_target()

    def flops(self, b):
        """2 per element (+1 per group for a non-zero epsilon)."""
        return 2 * in_work(b) + (0 if self.epsilon == 0 else 1)


@quick_init
@dataclass(frozen=True, eq=False)
class SoftMax(Operator):
    """(older generation) softmax over the target axes."""

    contracted: bool = False

    glyph = "softmax"
    family = "norm"

    def check(self, site):
        """One operand, one result on the same target axes."""
        _keeps_target(site)

    def flops(self, b):
        """5 per element."""
        return 5 * in_work(b)


__all__ = ["L1Norm", "L2Norm", "Normalize", "SoftMax"]
