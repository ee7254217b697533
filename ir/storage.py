"""Where emulation rounds: the storage format each ``Broadcasted`` output is held in.

The one rule both the interpreter and the code generator follow (``interpreter/QUANT_POLICY.md``
states it in full):

1. a ``TypeConvert`` output is held in its ``target`` field's format;
2. any other computing operator's output is held in its output weave's format when that is a
   ``Quantified`` real (or a ``Complex`` over one); bare ``R`` is never rounded, and naturals
   change only through an explicit ``TypeConvert``;
3. operators that only move values (views, concatenations, ``Identity``, ``Cast``) and boxes
   (whose bodies round for themselves) are exempt.
"""
from __future__ import annotations

from .datatypes import Complex, Datatype, Quantified, kind, storage_encoding
from .morphisms import Broadcasted
from .operators import (
    BlockOperator,
    Cast,
    ConcatenateAxes,
    CovariantView,
    DeconcatenateAxes,
    Identity,
    ParaBlockOperator,
    TypeConvert,
    View,
)

ROUNDING_EXEMPT = (View, CovariantView, ConcatenateAxes, DeconcatenateAxes, Identity, Cast,
                   BlockOperator, ParaBlockOperator)


def output_format(b: Broadcasted, j: int) -> Datatype | None:
    """The datatype output ``j`` of ``b`` is rounded to in emulate mode, or None."""
    op = b.operator
    if isinstance(op, ROUNDING_EXEMPT):
        return None
    if isinstance(op, TypeConvert):
        dt = op.target if op.target is not None else b.output_weaves[j].datatype
        return dt if storage_encoding(dt) is not None else None
    dt = b.output_weaves[j].datatype
    if storage_encoding(dt) is None or kind(dt) == "natural":
        return None
    return dt


def block_scale(dt: Datatype):
    """The ``BlockScale`` of a (possibly complex) quantised datatype, or None."""
    if isinstance(dt, Quantified):
        return dt.scale
    if isinstance(dt, Complex):
        return block_scale(dt.base)
    return None
