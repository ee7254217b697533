"""Normalisations over target axes (docs/format.md §11.4, §11.5; older ``SoftMax``).

* ``Normalize``: ``y = x (mean(x^2) + eps)^(-1/2)`` over **all target axes jointly**, the mean
  over live positions only (divided by the live count); then ``* gain``, ``+ shift``. The
  older field-less form (``epsilon`` None) is RMSNorm without gain, ``eps = 1e-5``.
* ``L2Norm``: ``y = x / sqrt(sum x^2)`` over all target axes jointly (live terms; no epsilon).
* ``L1Norm``: ``y = x / (sum x + eps)`` over its one target axis (live terms; dead stay dead).
* ``SoftMax`` (older generation): stable softmax over all target axes jointly; dead positions
  stand for -inf before the exponential (0 after it).

A slice whose positions are all dead is dead. Each operator's maths is one function
(``_rms``, ``_softmax``) that the rule and the kernel (the all-live case, set up once per site
for the plan) both call.
"""
from __future__ import annotations

import math

import numpy as np

from ncdc.ir.operators import L1Norm, L2Norm, Normalize, SoftMax

from ..registry import kernel, rule
from ..values import any_over, finished, land, live_count

LEGACY_RMS_EPSILON = 1e-5
_F64 = np.dtype(np.float64)
_sum, _max, _exp, _sqrt = np.add.reduce, np.maximum.reduce, np.exp, np.sqrt


def _ntarget(b, k=0):
    return len(b.input_weaves[k].target)


def _rms(x, axes, count, eps, centred: bool, live=None):
    """``x`` (its mean subtracted first when ``centred``) divided by ``sqrt(mean |x|^2 + eps)``
    over ``axes``, each mean over ``count`` positions (the live ones: ``live`` zeroes the dead
    after centring)."""
    if centred:
        x = x - _sum(x, axis=axes, keepdims=True) / count
        if live is not None:
            x = np.where(live, x, 0)
    sq = np.square(np.abs(x)) if x.dtype.kind == "c" else x * x
    return x / _sqrt(_sum(sq, axis=axes, keepdims=True) / count + eps)


def _gained(y, op, params):
    if op.gain:
        y = y * params["gain"]
    if op.bias:
        y = y + params["shift"]
    return y


def _as_float(x):
    if x.dtype is _F64:
        return x
    return np.asarray(x, dtype=np.complex128 if np.iscomplexobj(x) else np.float64)


def _epsilon(op, ctx):
    return LEGACY_RMS_EPSILON if op.epsilon is None else ctx.number(op.epsilon)


@rule(Normalize)
def normalize(b, inputs, ctx):
    op = b.operator
    (v,) = inputs
    x = _as_float(np.asarray(v.values))
    axes = tuple(range(x.ndim - _ntarget(b), x.ndim))
    sizes = ctx.sizes(b.input_weaves[0].target)
    eps = _epsilon(op, ctx)
    with np.errstate(divide="ignore", invalid="ignore"):
        if v.live is None:
            y, live = _rms(x, axes, max(math.prod(sizes), 1), eps, op.centred), None
        else:
            count = live_count(v.live, axes, sizes)
            y = _rms(x, axes, np.maximum(count, 1), eps, op.centred, v.live)
            live = land(v.live, count > 0)
    roles = (("gain",) if op.gain else ()) + (("shift",) if op.bias else ())
    return [finished(_gained(y, op, {role: ctx.param(role) for role in roles}), live)]


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


def _softmax(x, axes):
    """Stable softmax over ``axes``: ``e^(x - max)`` normalised; a row whose maximum is not
    finite is shifted by 0 instead."""
    m = _max(x, axis=axes, keepdims=True)
    if not math.isfinite(_sum(m, axis=None)):     # some maximum is not finite (or the sum
        m = np.where(np.isfinite(m), m, 0.0)      # overflowed: then this is a no-op)
    e = _exp(x - m)
    return e / _sum(e, axis=axes, keepdims=True)


@rule(SoftMax)
def softmax(b, inputs, ctx):
    (v,) = inputs
    x = np.asarray(v.values, dtype=np.float64)
    axes = tuple(range(x.ndim - _ntarget(b), x.ndim))
    xm = x if v.live is None else np.where(v.live, x, -np.inf)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        y = _softmax(xm, axes)
    live = None if v.live is None else land(v.live, any_over(v.live, axes))
    return [finished(y, live)]


@kernel(Normalize)
def normalize_kernel(b, ctx):
    op = b.operator
    n = max(math.prod(ctx.sizes(b.input_weaves[0].target)), 1)
    eps = _epsilon(op, ctx)
    if isinstance(eps, complex):
        return None
    axes = tuple(range(-_ntarget(b), 0))
    centred = op.centred

    def run(xs, params):
        return [_gained(_rms(_as_float(xs[0]), axes, n, eps, centred), op, params)]

    return run


@kernel(SoftMax)
def softmax_kernel(b, ctx):
    axes = tuple(range(-_ntarget(b), 0))

    def run(xs, params):
        (x,) = xs
        return [_softmax(x if x.dtype is _F64 else np.asarray(x, dtype=np.float64), axes)]

    return run
