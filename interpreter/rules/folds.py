"""Sums of wires and folds over one axis (docs/format.md §11.6, §11.8–§11.10).

* ``AdditionOp``: pointwise sum; a dead operand counts as 0 (its stored value), the result is
  dead only if every operand is (§16 item 1). Naturals sum exactly.
* ``Maximum``: max over the live entries of the one target axis (identity -inf).
* ``BitwiseXor``: XOR of the live naturals of the one target axis (identity 0).
* ``Modulo``: ``a mod b`` of two rank-0 naturals (dead if either is); a zero divisor is an error.
* ``SinkShift`` (``ir/rewrites.py``): ``(x - M, s - M)``, ``M = max(max over the live x, s)``.
"""
from __future__ import annotations

import numpy as np

from ncdc.ir.operators import AdditionOp, BitwiseXor, Maximum, Modulo
from ncdc.ir.rewrites import SinkShift

from ..registry import kernel, rule
from ..values import any_over, as_kind, dtype_of, finished, land, lor


def _total(arrays, dt, want):
    """The pointwise sum of ``arrays`` (their stored values), in ``dt``'s kind (``want``: its
    numpy dtype)."""
    total = arrays[0]
    for x in arrays[1:]:
        total = total + x
    if type(total) is np.ndarray and total.dtype == want:
        return total
    return as_kind(np.asarray(total), dt)


@rule(AdditionOp)
def addition(b, inputs, ctx):
    if not inputs:
        raise ctx.error("a sum of no operands")
    dt = b.output_weaves[0].datatype
    out = _total([v.values for v in inputs], dt, dtype_of(dt))
    return [finished(out, lor(*(v.live for v in inputs)))]


@kernel(AdditionOp)
def addition_kernel(b, ctx):
    if not b.input_weaves:
        return None
    dt = b.output_weaves[0].datatype
    want = dtype_of(dt)

    def run(xs, params):
        return [_total(xs, dt, want)]

    return run


def _one_axis(b, ctx):
    if len(b.input_weaves[0].target) != 1:
        raise ctx.error("this fold acts on exactly one target axis")


@rule(Maximum)
def maximum(b, inputs, ctx):
    _one_axis(b, ctx)
    (v,) = inputs
    x = v.values
    if v.live is not None:
        low = -np.inf if x.dtype.kind in "fc" else np.iinfo(x.dtype).min
        x = np.where(v.live, x, low)
    out = np.max(x, axis=-1, keepdims=True)
    live = any_over(v.live, (x.ndim - 1,))
    return [finished(out[..., 0], None if live is None else live[..., 0])]


@rule(BitwiseXor)
def bitwise_xor(b, inputs, ctx):
    _one_axis(b, ctx)
    (v,) = inputs
    x = as_kind(v.values, b.input_weaves[0].datatype)
    out = np.bitwise_xor.reduce(x, axis=-1)
    live = None if v.live is None else np.any(v.live, axis=-1)
    return [finished(out, live)]


@rule(Modulo)
def modulo(b, inputs, ctx):
    a, d = inputs
    x = as_kind(a.values, b.input_weaves[0].datatype)
    y = as_kind(d.values, b.input_weaves[1].datatype)
    live = land(a.live, d.live)
    zero = (y == 0) if live is None else ((y == 0) & live)
    if np.any(zero):
        raise ctx.error("modulo by zero at a live position")
    y = np.where(y == 0, 1, y)
    return [finished(np.mod(x, y), live)]


@rule(SinkShift)
def sink_shift(b, inputs, ctx):
    x, s = inputs
    _one_axis(b, ctx)
    row = x.values if x.live is None else np.where(x.live, x.values, -np.inf)
    shift = np.maximum(np.max(row, axis=-1), s.values)
    return [finished(x.values - shift[..., None], x.live), finished(s.values - shift, s.live)]
