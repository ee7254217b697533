"""Datatypes of arrays: reals, naturals, complex numbers and quantised storage formats."""
from __future__ import annotations

import enum
from dataclasses import dataclass

import sympy

from .frozen import quick_init


class Encoding(enum.Enum):
    FP32 = "FP32"
    FP16 = "FP16"
    BF16 = "BF16"
    E5M2 = "E5M2"
    E4M3 = "E4M3"
    E2M1 = "E2M1"
    UE8M0 = "UE8M0"
    INT64 = "INT64"
    INT32 = "INT32"


class Datatype:
    """Base of datatypes (structural equality)."""


@quick_init
@dataclass(frozen=True)
class Reals(Datatype):
    def __str__(self):
        return "R"


@quick_init
@dataclass(frozen=True)
class Natural(Datatype):
    """Non-negative integers below ``max_value``."""

    max_value: sympy.Expr

    def __str__(self):
        return f"Nat<{sympy.sstr(self.max_value)}>"


@quick_init
@dataclass(frozen=True)
class Complex(Datatype):
    base: Datatype

    def __str__(self):
        return f"C[{self.base}]"


@quick_init
@dataclass(frozen=True)
class BlockScale:
    """One scale in ``form`` per ``channels`` consecutive values (and ``rows`` rows)."""

    form: Encoding
    channels: sympy.Expr
    rows: sympy.Expr


@quick_init
@dataclass(frozen=True)
class Quantified(Datatype):
    """``wraps`` held in storage format ``form`` (optionally block-scaled)."""

    wraps: Datatype
    size: sympy.Expr
    vector: sympy.Expr
    form: Encoding
    scale: BlockScale | None = None

    def __str__(self):
        if self.scale is not None:
            return f"Q({self.form.value}|{self.scale.form.value}/{sympy.sstr(self.scale.channels)})"
        if isinstance(self.wraps, Natural):
            return f"Q({self.form.value},{self.wraps})"
        return f"Q({self.form.value})"


def strip(dt: Datatype) -> Datatype:
    """The mathematical kind of a datatype: every ``Quantified`` wrapper removed."""
    if isinstance(dt, Quantified):
        return strip(dt.wraps)
    if isinstance(dt, Complex):
        return Complex(strip(dt.base))
    return dt


def compatible(a: Datatype, b: Datatype) -> bool:
    """Equality after stripping quantisation; ``Natural`` bounds are not compared."""
    sa, sb = strip(a), strip(b)
    if isinstance(sa, Natural) and isinstance(sb, Natural):
        return True
    return sa == sb


def kind(dt: Datatype) -> str:
    """'real', 'natural' or 'complex'."""
    s = strip(dt)
    if isinstance(s, Natural):
        return "natural"
    if isinstance(s, Complex):
        return "complex"
    return "real"


def storage_encoding(dt: Datatype) -> Encoding | None:
    """The element encoding of a quantised datatype (or of a complex one's parts)."""
    if isinstance(dt, Quantified):
        return dt.form
    if isinstance(dt, Complex):
        return storage_encoding(dt.base)
    return None
