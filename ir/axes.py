"""Axes: the objects of the stride category. Identity is the uid; the name is decoration."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from .frozen import quick_init
from .names import Name


@quick_init
@dataclass(frozen=True, eq=False)
class Axis:
    """Base of every axis kind: a uid, a display name and a symbolic storage length."""

    uid: int
    name: Name | None
    size: sympy.Expr
    path: str = field(default="", compare=False, repr=False)

    def __eq__(self, other):
        return isinstance(other, Axis) and other.uid == self.uid

    def __hash__(self):
        return hash(("axis", self.uid))

    def __repr__(self):
        return f"{type(self).__name__}({self.label}#{self.uid})"

    @property
    def label(self) -> str:
        return self.name.text if self.name is not None else f"axis{self.uid}"

    def __str__(self) -> str:
        return self.label


@quick_init
@dataclass(frozen=True, eq=False)
class RawAxis(Axis):
    """An ordinary dense axis."""


@quick_init
@dataclass(frozen=True, eq=False)
class AffineSparseAxis(Axis):
    """An axis whose position ``j`` is live iff
    ``0 <= sum(guide_strides[g] * i_g) + stride * j + shift < extent`` (no upper bound if extent
    is None). Derived information: liveness propagation gives the same masks."""

    guides: tuple[Axis, ...] = ()
    guide_strides: tuple[sympy.Expr, ...] = ()
    stride: sympy.Expr = sympy.Integer(1)
    shift: sympy.Expr = sympy.Integer(0)
    extent: sympy.Expr | None = None


@quick_init
@dataclass(frozen=True, eq=False)
class SparseAxis(Axis):
    """``k/n``: storage length ``size`` with ``activity`` live positions chosen by data."""

    activity: sympy.Expr = sympy.Integer(0)


@quick_init
@dataclass(frozen=True, eq=False)
class ConcatenatedAxis(Axis):
    """An axis made of ``parts`` laid end to end; liveness is the part's."""

    parts: tuple[Axis, ...] = ()

    @property
    def label(self) -> str:
        if self.name is not None:
            return self.name.text
        return " + ".join(p.label for p in self.parts)


def is_token_axis(axis: Axis) -> bool:
    """Whether ``axis`` is the sequence (token) axis: code form ``tokens`` (or ``tokens_size``),
    or, without a code form, the name ``x``."""
    name = axis.name
    if name is None:
        return False
    if name.code_form:
        return name.code_form.removesuffix("_size") == "tokens"
    return name.text == "x"
