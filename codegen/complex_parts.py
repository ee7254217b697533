"""Complex values held as their real and imaginary parts (PRECISION.md: complex arithmetic).

A class whose complex values only flow between operators that have a form on real parts holds
every complex value as two real tensors of the same shape (``Wire.imag``, ``Operand.imag`` and
``OpResult.imag`` name the imaginary part; ``var``/``expr`` the real part). Those operators are:
pairs taken as complex numbers, rotary tables, casts, the conjugate, pointwise products, and
complex numbers taken back as pairs. A rotary embedding then reads as the hand-written one,
``x_re * cos - x_im * sin`` and ``x_re * sin + x_im * cos``, with no complex dtype (inductor
compiles real arithmetic; it falls back to eager for complex). The products round where the
complex ones do (each product, then the sum), and an emulate-mode rounding of a complex value
rounds both parts, so the values are the complex form's.

Whether a class may do so is read off the IR for its whole body (:func:`eligible`): no complex
value may reach another operator, a block called as a submodule, the tape or the class's
inputs and outputs. Otherwise complex values stay complex tensors.
"""
from __future__ import annotations

import sympy

from ncdc.ir.datatypes import kind
from ncdc.ir.morphisms import Block, Broadcasted, Drop, Grab, ParaWrap
from ncdc.ir.numeric import FREE_INPUT
from ncdc.ir.operators import (
    Arithmetic,
    BlockOperator,
    Cast,
    Decomplex,
    Einops,
    Identity,
    PairsAsComplex,
    Rotary,
    TypeConvert,
)
from ncdc.ir.walk import walk

_PLAIN = (PairsAsComplex, Decomplex, TypeConvert, Cast, Identity, Rotary)
_ON_PARTS = (sympy.conjugate(FREE_INPUT), FREE_INPUT, -FREE_INPUT)


def _complex(arrays) -> bool:
    return any(kind(a.datatype) == "complex" for a in arrays)


def _has_parts_form(inline, b: Broadcasted) -> bool:
    op = b.operator
    if isinstance(op, _PLAIN):
        return True
    if isinstance(op, Arithmetic):
        return op.formula in _ON_PARTS
    if isinstance(op, Einops):  # a pointwise product (no group is summed)
        return not any(op.signature) and len(b.output_weaves) == 1
    if isinstance(op, BlockOperator):  # drawn in place: its body is lowered here
        return op.block is not None and not b.degree and inline(op.block)
    return False


def eligible(inline, body, pairs_mode: bool = False) -> bool:
    """Whether the class lowering ``body`` holds its complex values as real parts: it has some,
    and each is made and used only by operators with a real-parts form (blocks drawn in place,
    those ``inline(block)`` accepts, included, their bodies checked too)."""
    if pairs_mode:
        return False
    try:
        if _complex(body.dom) or _complex(body.cod):
            return False
    except Exception:  # noqa: BLE001 - a cut or malformed body: keep the complex form
        return False
    found = False
    for site in walk(body):
        n = site.node
        if isinstance(n, (Drop, Grab, ParaWrap)):
            try:
                if _complex(n.dom) or _complex(n.cod):
                    return False
            except Exception:  # noqa: BLE001
                return False
            continue
        if isinstance(n, Block) and n is not body:
            if (_complex(n.dom) or _complex(n.cod)) and not inline(n):
                return False
            continue
        if not isinstance(n, Broadcasted):
            continue
        arrays = [w.datatype for w in n.input_weaves] + [w.datatype for w in n.output_weaves]
        if not any(kind(dt) == "complex" for dt in arrays):
            continue
        found = True
        if not _has_parts_form(inline, n):
            return False
    return found
