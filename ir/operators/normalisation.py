"""Normalisations over the target axes."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from .base import Operator


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


@dataclass(frozen=True, eq=False)
class L1Norm(Operator):
    """``y = x / (sum x + eps)`` over the single target axis."""

    contracted: bool = False
    epsilon: sympy.Expr = sympy.Integer(0)


@dataclass(frozen=True, eq=False)
class SoftMax(Operator):
    """(older generation) softmax over the target axes."""

    contracted: bool = False
