"""Nullary sources that are not learned: fixed arrays and rotary tables."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from .base import Operator, need_weaves
from .measure import ZERO


class _Source(Operator):
    """No operand, one result; computing it costs 0 (a table built once)."""

    def check(self, site):
        site.arity(n_in=0, n_out=1)

    def flops(self, b):
        return ZERO


@dataclass(frozen=True, eq=False)
class FixedArray(_Source):
    """A constant array the spec defines by name; its values are not in the JSON."""

    glyph = "const"
    family = "source"
    roles = ("fixed",)

    def param_arrays(self, b):
        """``fixed`` over the output's target axes (not learned)."""
        need_weaves(self, b, need_in=False)
        outw = b.output_weaves[0]
        tgt = outw.target
        return [("fixed", tuple(a.size for a in tgt), tuple(a.label for a in tgt),
                 outw.datatype, False)]


@dataclass(frozen=True, eq=False)
class Rotary(_Source):
    """``F[x, t] = exp(i * position_stride * x * base^(-t/|t|))``."""

    base: sympy.Expr = sympy.Integer(10000)
    position_stride: sympy.Expr = sympy.Integer(1)

    glyph = "RoPE"
    family = "source"


@dataclass(frozen=True, eq=False)
class YarnRotary(Rotary):
    """Rotary with YaRN frequency interpolation (``factor``, ramp ``[ramp_start, ramp_end]``)."""

    factor: sympy.Expr = sympy.Integer(1)
    ramp_start: sympy.Expr = sympy.Integer(0)
    ramp_end: sympy.Expr = sympy.Integer(1)

    glyph = "YaRN RoPE"


__all__ = ["FixedArray", "Rotary", "YarnRotary"]
