"""Bytes of arrays at their storage formats: learned weights at a chosen weight format, wires at
the format their datatype declares. Pure sympy (sizes may be symbolic).

Weight formats: ``float32`` 4 bytes, ``bfloat16`` 2, ``mxfp8`` one E4M3 byte per element plus one
UE8M0 byte per group of 32, ``mxfp4`` half a byte per element (E2M1 packed two to a byte) plus
the same scales. Block scales group runs along the axes a ``Linear`` weight contracts (its input
axes, flattened), along the trailing axis for every other array; a run whose length is not a
multiple of 32 ends in a partial group, which still takes a scale.
"""
from __future__ import annotations

import sympy

from .datatypes import Complex, Datatype, Encoding, Natural, Quantified, strip
from .morphisms import Broadcasted
from .operators import Linear

ONE = sympy.Integer(1)

FORMATS = ("float32", "bfloat16", "mxfp8", "mxfp4")
"""Storage formats of learned weights, in the order reports list them."""

FORMAT_ALIASES = {"fp32": "float32", "f32": "float32", "bf16": "bfloat16", "fp8": "mxfp8",
                  "fp4": "mxfp4"}

_ENCODING_BYTES = {Encoding.FP32: 4, Encoding.FP16: 2, Encoding.BF16: 2, Encoding.E5M2: 1,
                   Encoding.E4M3: 1, Encoding.E2M1: sympy.Rational(1, 2), Encoding.UE8M0: 1,
                   Encoding.INT64: 8, Encoding.INT32: 4}


def _prod(xs) -> sympy.Expr:
    xs = list(xs)
    return sympy.Mul(*xs) if xs else ONE


def format_name(text: str) -> str:
    """The canonical name of a weight format (``bf16`` -> ``bfloat16``); ValueError if unknown."""
    key = text.strip().lower()
    key = FORMAT_ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"unknown weight format {text!r} (known: {', '.join(FORMATS)})")
    return key


def scale_layout(shape: tuple, lead: int = 0) -> tuple:
    """(rows, run): the array seen as ``rows`` independent runs of ``run`` values that block
    scales group: the ``lead`` leading axes flattened (``lead`` > 0), else the trailing axis."""
    shape = tuple(shape)
    if not shape:
        return ONE, ONE
    if 0 < lead < len(shape):
        return _prod(shape[lead:]), _prod(shape[:lead])
    if lead >= len(shape):
        return ONE, _prod(shape)
    return _prod(shape[:-1]), shape[-1]


def weight_bytes(shape: tuple, fmt: str, lead: int = 0) -> sympy.Expr:
    """Bytes of a real array of ``shape`` held in weight format ``fmt``, its block scales laid
    out by :func:`scale_layout`."""
    n = _prod(shape)
    if fmt == "float32":
        return 4 * n
    if fmt == "bfloat16":
        return 2 * n
    rows, run = scale_layout(shape, lead)
    scales = rows * sympy.ceiling(run / 32)
    if fmt == "mxfp8":
        return n + scales
    if fmt == "mxfp4":
        return rows * sympy.ceiling(run / 2) + scales
    raise ValueError(f"unknown weight format {fmt!r}")


def weight_lead(b: Broadcasted, role: str) -> int:
    """How many leading axes of a parameter of ``b`` block scales group along: a ``Linear``
    weight's input target axes (the axes it contracts); 0 (the trailing axis) otherwise."""
    if role == "weight" and isinstance(b.operator, Linear):
        return sum(len(w.target) for w in b.input_weaves)
    return 0


def element_bytes(dt: Datatype) -> sympy.Expr:
    """Bytes per element of a wire in its declared storage format: the element encoding plus a
    block scale's share; bare reals count 4 (float32), bare naturals 8 (int64)."""
    if isinstance(dt, Complex):
        return 2 * element_bytes(dt.base)
    if isinstance(dt, Quantified):
        out = sympy.sympify(_ENCODING_BYTES[dt.form])
        if dt.scale is not None:
            out += sympy.sympify(_ENCODING_BYTES[dt.scale.form]) / (dt.scale.channels
                                                                     * dt.scale.rows)
        return out
    if isinstance(strip(dt), Natural):
        return sympy.Integer(8)
    return sympy.Integer(4)


__all__ = ["FORMATS", "element_bytes", "format_name", "scale_layout", "weight_bytes",
           "weight_lead"]
