"""Nullary sources that are not learned: fixed arrays, constants, positions, rotary tables."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..datatypes import kind
from ..frozen import quick_init
from .base import Operator, need_weaves
from .measure import ZERO


class _Source(Operator):
    """No operand, one result; computing it costs 0 (a table built once)."""

    def check(self, site):
        site.arity(n_in=0, n_out=1)

    def flops(self, b):
        return ZERO


@quick_init
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


@quick_init
@dataclass(frozen=True, eq=False)
class Rotary(_Source):
    """``F[x, t] = exp(i * position_stride * x * base^(-t/|t|))``."""

    base: sympy.Expr = sympy.Integer(10000)
    position_stride: sympy.Expr = sympy.Integer(1)

    glyph = "RoPE"
    family = "source"


@quick_init
@dataclass(frozen=True, eq=False)
class YarnRotary(Rotary):
    """Rotary with YaRN frequency interpolation (``factor``, ramp ``[ramp_start, ramp_end]``)."""

    factor: sympy.Expr = sympy.Integer(1)
    ramp_start: sympy.Expr = sympy.Integer(0)
    ramp_end: sympy.Expr = sympy.Integer(1)

    glyph = "YaRN RoPE"


@quick_init
@dataclass(frozen=True, eq=False)
class ConstantOp(_Source):
    """``value`` at every position of the output (pyncd's ``ConstantOp``, older ``Constant``
    with a ``value``): the unit a fold starts from. The output's target axes, if any, and its
    degree all hold the same number."""

    value: sympy.Expr = sympy.Integer(0)

    glyph = "constant"
    family = "source"

    def check(self, site):
        """No operand, one result; a natural result needs a whole number."""
        if not site.arity(n_in=0, n_out=1):
            return
        v = sympy.sympify(self.value)
        if (kind(site.b.output_weaves[0].datatype) == "natural" and v.is_number
                and not (v.is_integer and v >= 0)):
            site.error("operator-type", f"{site.name}: a natural result cannot hold {v}",
                       ".value")


@quick_init
@dataclass(frozen=True, eq=False)
class Arrange(_Source):
    """``out[i] = i`` along the one target axis of the output, a ``Natural`` (pyncd's
    ``Arrange``): the positions ``0, 1, ..., |x| - 1`` of the axis ``x``."""

    glyph = "arange"
    family = "source"

    def check(self, site):
        """No operand; one result with one target axis, of natural datatype."""
        if site.arity(n_in=0, n_out=1) and site.rank("output", 0, 1, "the arranged axis"):
            dt = site.b.output_weaves[0].datatype
            if kind(dt) != "natural":
                site.error("operator-type", f"{site.name}: the positions are naturals, the "
                           f"weave says {dt}", ".output_weaves[0]")


__all__ = ["Arrange", "ConstantOp", "FixedArray", "Rotary", "YarnRotary"]
