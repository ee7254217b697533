"""Normalisations over target axes (docs/format.md §11.4, §11.5; older ``SoftMax``).

* ``Normalize``: ``y = x (mean(x^2) + eps)^(-1/2)`` over **all target axes jointly**, the mean
  over live positions only (divided by the live count); then ``* gain``, ``+ shift``. The
  older field-less form (``epsilon`` None) is RMSNorm without gain, ``eps = 1e-5``.
* ``L2Norm``: ``y = x / sqrt(sum x^2)`` over all target axes jointly (live terms; no epsilon).
* ``L1Norm``: ``y = x / (sum x + eps)`` over its one target axis (live terms; dead stay dead).
* ``SoftMax`` (older generation): stable softmax over all target axes jointly; dead positions
  stand for -inf before the exponential (0 after it).

A slice whose positions are all dead is dead.
"""
from __future__ import annotations

import math

import numpy as np
from ncdc.ir.operators import L1Norm, L2Norm, Normalize, SoftMax

from ..registry import kernel, rule
from ..values import any_over, finished, land, live_count

LEGACY_RMS_EPSILON = 1e-5


def _ntarget(b, k=0):
    nt = len(b.input_weaves[k].target)
    return nt


@rule(Normalize)
def normalize(b, inputs, ctx):
    op = b.operator
    (v,) = inputs
    x = np.asarray(v.values, dtype=np.complex128 if np.iscomplexobj(v.values) else np.float64)
    nt = _ntarget(b)
    axes = tuple(range(x.ndim - nt, x.ndim))
    if op.centred:  # LayerNorm (pyncd reading): the mean of the live positions subtracted
        count = live_count(v.live, axes, ctx.sizes(b.input_weaves[0].target))
        with np.errstate(divide="ignore", invalid="ignore"):
            x = x - np.sum(x, axis=axes, keepdims=True) / np.maximum(count, 1)
        if v.live is not None:
            x = np.where(v.live, x, 0)
    sq = np.square(np.abs(x)) if np.iscomplexobj(x) else x * x
    eps = LEGACY_RMS_EPSILON if op.epsilon is None else ctx.number(op.epsilon)
    with np.errstate(divide="ignore", invalid="ignore"):
        if v.live is None:
            n = math.prod(ctx.sizes(b.input_weaves[0].target))
            y = x / np.sqrt(sq.sum(axis=axes, keepdims=True) / max(n, 1) + eps)
            live = None
        else:
            count = live_count(v.live, axes, ctx.sizes(b.input_weaves[0].target))
            mean = np.sum(sq, axis=axes, keepdims=True) / np.maximum(count, 1)
            y = x / np.sqrt(mean + eps)
            live = land(v.live, count > 0)
    if op.gain:
        y = y * ctx.param("gain")
    if op.bias:
        y = y + ctx.param("shift")
    return [finished(y, live)]


@rule(L2Norm)
def l2norm(b, inputs, ctx):
    (v,) = inputs
    x = np.asarray(v.values, dtype=np.float64)
    axes = tuple(range(x.ndim - _ntarget(b), x.ndim))
    with np.errstate(divide="ignore", invalid="ignore"):
        y = x / np.sqrt(np.sum(x * x, axis=axes, keepdims=True))
    live = None if v.live is None else land(v.live, any_over(v.live, axes))
    return [finished(y, live)]


@rule(L1Norm)
def l1norm(b, inputs, ctx):
    op = b.operator
    (v,) = inputs
    nt = _ntarget(b)
    if nt != 1:
        raise ctx.error(f"L1Norm acts on one target axis, not {nt}")
    eps = ctx.number(op.epsilon)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = v.values / (np.sum(v.values, axis=-1, keepdims=True) + eps)
    return [finished(y, v.live)]


@rule(SoftMax)
def softmax(b, inputs, ctx):
    (v,) = inputs
    x = np.asarray(v.values, dtype=np.float64)
    nt = _ntarget(b)
    axes = tuple(range(x.ndim - nt, x.ndim))
    xm = x if v.live is None else np.where(v.live, x, -np.inf)
    m = xm.max(axis=axes, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if not np.isfinite(m).all():
            m = np.where(np.isfinite(m), m, 0.0)
        e = np.exp(xm - m)
        y = e / e.sum(axis=axes, keepdims=True)
    live = None if v.live is None else land(v.live, any_over(v.live, axes))
    return [finished(y, live)]


_F64 = np.dtype(np.float64)
_sum, _max, _exp, _sqrt = np.add.reduce, np.maximum.reduce, np.exp, np.sqrt


@kernel(Normalize)
def normalize_kernel(b, ctx):
    op = b.operator
    nt = _ntarget(b)
    n = max(math.prod(ctx.sizes(b.input_weaves[0].target)), 1)
    eps = LEGACY_RMS_EPSILON if op.epsilon is None else ctx.number(op.epsilon)
    if isinstance(eps, complex):
        return None
    axes = tuple(range(-nt, 0))
    centred, gain, shift = op.centred, op.gain, op.bias

    def run(xs, params):
        (x,) = xs
        if x.dtype is not _F64:
            x = np.asarray(x, dtype=np.complex128 if np.iscomplexobj(x) else np.float64)
        if centred:
            x = x - _sum(x, axis=axes, keepdims=True) / n
        sq = np.square(np.abs(x)) if x.dtype.kind == "c" else x * x
        y = x / _sqrt(_sum(sq, axis=axes, keepdims=True) / n + eps)
        if gain:
            y = y * params["gain"]
        if shift:
            y = y + params["shift"]
        return [y]

    return run


@kernel(SoftMax)
def softmax_kernel(b, ctx):
    axes = tuple(range(-_ntarget(b), 0))

    def run(xs, params):
        (x,) = xs
        if x.dtype is not _F64:
            x = np.asarray(x, dtype=np.float64)
        m = _max(x, axis=axes, keepdims=True)
        if not math.isfinite(_sum(m, axis=None)):     # some maximum is not finite (or the
            m = np.where(np.isfinite(m), m, 0.0)      # sum overflowed: then this is a no-op)
        e = _exp(x - m)
        return [e / _sum(e, axis=axes, keepdims=True)]

    return run
