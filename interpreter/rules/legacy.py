"""``WeightedTriangularLower`` (older pyncd generation) on a square target ``[r, c]``:
``T = tril(X)`` (keep ``c <= r``), then ``Y = T / (sum_c T + 1e-8)`` — a causal
renormalisation, applied after the softmax in the examples. Liveness passes through."""
from __future__ import annotations

import numpy as np

from ncdc.ir.operators import WeightedTriangularLower

from ..registry import rule
from ..values import finished

WTL_EPSILON = 1e-8


@rule(WeightedTriangularLower)
def weighted_tril(b, inputs, ctx):
    (v,) = inputs
    if len(b.input_weaves[0].target) != 2:
        raise ctx.error("WeightedTriangularLower acts on a two-axis target")
    x = v.values
    r, c = x.shape[-2], x.shape[-1]
    keep = np.arange(c)[None, :] <= np.arange(r)[:, None]
    t = np.where(keep, x, 0.0)
    y = t / (np.sum(t, axis=-1, keepdims=True) + WTL_EPSILON)
    return [finished(y, v.live)]
