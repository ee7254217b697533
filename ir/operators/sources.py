"""Nullary sources that are not learned: fixed arrays and rotary tables."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from .base import Operator


@dataclass(frozen=True, eq=False)
class FixedArray(Operator):
    """A constant array the spec defines by name; its values are not in the JSON."""


@dataclass(frozen=True, eq=False)
class Rotary(Operator):
    """``F[x, t] = exp(i * position_stride * x * base^(-t/|t|))``."""

    base: sympy.Expr = sympy.Integer(10000)
    position_stride: sympy.Expr = sympy.Integer(1)


@dataclass(frozen=True, eq=False)
class YarnRotary(Rotary):
    """Rotary with YaRN frequency interpolation (``factor``, ramp ``[ramp_start, ramp_end]``)."""

    factor: sympy.Expr = sympy.Integer(1)
    ramp_start: sympy.Expr = sympy.Integer(0)
    ramp_end: sympy.Expr = sympy.Integer(1)
