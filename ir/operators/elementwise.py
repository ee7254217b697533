"""Elementwise operators (all slots TILED or a fixed small target)."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..datatypes import Datatype, Quantified, compatible
from ..frozen import quick_init
from .base import Operator
from .measure import ZERO, formula_ops, out_work


class _Pointwise(Operator):
    """One operand, one result, every slot TILED (the rule of the operators below)."""

    def check(self, site):
        if site.arity(n_in=1, n_out=1):
            site.all_tiled()


@quick_init
@dataclass(frozen=True, eq=False)
class Arithmetic(_Pointwise):
    """Evaluate ``formula`` (a sympy expression in :data:`ir.numeric.FREE_INPUT`) per element."""

    formula: sympy.Expr = sympy.Integer(0)

    glyph = "f(x)"
    family = "elementwise"

    def flops(self, b):
        """Per element, one per operation of the formula that involves the operand (an
        ``n``-ary sum or product ``n - 1``, every power and function 1; constants folded)."""
        return formula_ops(self.formula) * out_work(b)


@quick_init
@dataclass(frozen=True, eq=False)
class Elementwise(_Pointwise):
    """(older generation) a named elementwise function: ``function`` is the canonical name
    decided by the decoder from the class or display name (``relu``, ``identity``, ...);
    ``declared`` is the kind the JSON names (``Elementwise``, ``ReLU`` or ``Dropout``)."""

    function: str = "identity"
    declared: str = "Elementwise"

    glyph = "σ"
    family = "elementwise"

    @property
    def shown(self) -> str:
        """The function's own name (``relu``, ``gelu``) where the decoder knew it."""
        return self.glyph if self.function in ("", "identity") else self.function

    def check(self, site):
        """Pointwise; an ``unknown`` function is a warning (``unknown-elementwise``)."""
        super().check(site)
        if self.function == "unknown":
            site.warning("unknown-elementwise", f"elementwise operator {self.label!r}: no "
                         "known function of that name; evaluating it is an error", ".operator")

    def flops(self, b):
        """1 per element."""
        return out_work(b)


@quick_init
@dataclass(frozen=True, eq=False)
class TypeConvert(Operator):
    """Change of storage format: identity in exact mode, rounding to ``target`` in emulation."""

    source: Datatype | None = None
    target: Datatype | None = None

    glyph = "cast"
    family = "cast"

    def check(self, site):
        """One operand, one result; ``source``/``target`` equal the weaves' datatypes, or equal
        after stripping quantisation (``datatype-leniency`` warning: the weave is trusted,
        docs/format.md §11.21)."""
        if not site.arity(n_in=1, n_out=1):
            return
        b = site.b
        for fld, declared, w, side in (("source", self.source, b.input_weaves[0], "input"),
                                       ("target", self.target, b.output_weaves[0], "output")):
            if declared is None or declared == w.datatype:
                continue
            if compatible(declared, w.datatype):
                site.warning("datatype-leniency", f"TypeConvert {fld} says {declared} but the "
                             f"{side} weave says {w.datatype} (equal after stripping "
                             "quantisation, docs/format.md §2.5)", f".operator.{fld}")
            else:
                site.error("operator-type", f"TypeConvert {fld} {declared} is incompatible "
                           f"with the weave's {w.datatype}", f".operator.{fld}")

    def flops(self, b):
        """1 per element; 4 to a block-scaled format (magnitude, group maximum, division by
        the scale, rounding)."""
        tgt = self.target if self.target is not None else (
            b.output_weaves[0].datatype if b.output_weaves else None)
        scaled = isinstance(tgt, Quantified) and tgt.scale is not None
        return (4 if scaled else 1) * out_work(b)


@quick_init
@dataclass(frozen=True, eq=False)
class Cast(_Pointwise):
    """Retyping of naturals; identity on values."""

    glyph = "cast"
    family = "cast"

    def flops(self, b):
        """A retyping: 0."""
        return ZERO


@quick_init
@dataclass(frozen=True, eq=False)
class GenericOperator(_Pointwise):
    """Meaning carried by the name alone (``\\lceil x \\rceil`` = ceiling)."""

    glyph = "f"
    family = "elementwise"

    def flops(self, b):
        """1 per element."""
        return out_work(b)


@quick_init
@dataclass(frozen=True, eq=False)
class _Regrouping(Operator):
    """A change between real pairs and complex numbers: one operand, one result, no FLOPs."""

    family = "elementwise"

    def check(self, site):
        """One operand, one result."""
        site.arity(n_in=1, n_out=1)

    def flops(self, b):
        """A regrouping: 0."""
        return ZERO


@quick_init
@dataclass(frozen=True, eq=False)
class PairsAsComplex(_Regrouping):
    """``[z] -> C[t]``: ``p[t] = v[2t] + i v[2t+1]``."""

    glyph = "ℂ pairs"


@quick_init
@dataclass(frozen=True, eq=False)
class Decomplex(_Regrouping):
    """``C[t] -> [z]``: ``y[2t] = Re p[t]``, ``y[2t+1] = Im p[t]``."""

    glyph = "ℂ → ℝ²"


@quick_init
@dataclass(frozen=True, eq=False)
class Identity(_Pointwise):
    """The identity on each scalar."""

    glyph = "id"
    family = "elementwise"

    def flops(self, b):
        """0."""
        return ZERO


__all__ = ["Arithmetic", "Cast", "Decomplex", "Elementwise", "GenericOperator", "Identity",
           "PairsAsComplex", "TypeConvert"]
