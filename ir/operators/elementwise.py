"""Elementwise operators (all slots TILED or a fixed small target)."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..datatypes import Datatype
from .base import Operator


@dataclass(frozen=True, eq=False)
class Arithmetic(Operator):
    """Evaluate ``formula`` (a sympy expression in :data:`ir.numeric.FREE_INPUT`) per element."""

    formula: sympy.Expr = sympy.Integer(0)


@dataclass(frozen=True, eq=False)
class Elementwise(Operator):
    """(older generation) a named elementwise function: ``function`` is the canonical name
    decided by the decoder from the class or display name (``relu``, ``identity``, ...);
    ``declared`` is the kind the JSON names (``Elementwise``, ``ReLU`` or ``Dropout``)."""

    function: str = "identity"
    declared: str = "Elementwise"


@dataclass(frozen=True, eq=False)
class TypeConvert(Operator):
    """Change of storage format: identity in exact mode, rounding to ``target`` in emulation."""

    source: Datatype | None = None
    target: Datatype | None = None


@dataclass(frozen=True, eq=False)
class Cast(Operator):
    """Retyping of naturals; identity on values."""


@dataclass(frozen=True, eq=False)
class GenericOperator(Operator):
    """Meaning carried by the name alone (``\\lceil x \\rceil`` = ceiling)."""


@dataclass(frozen=True, eq=False)
class PairsAsComplex(Operator):
    """``[z] -> C[t]``: ``p[t] = v[2t] + i v[2t+1]``."""


@dataclass(frozen=True, eq=False)
class Decomplex(Operator):
    """``C[t] -> [z]``: ``y[2t] = Re p[t]``, ``y[2t+1] = Im p[t]``."""


@dataclass(frozen=True, eq=False)
class Identity(Operator):
    """The identity on each scalar."""
