"""``Linear`` (docs/format.md §11.2): ``y[o] = sum_in x[in] W[in, o] (+ b[o])``, the same ``W`` at
every degree index; with no input the output *is* ``W``. Weight layout ``[in targets..., out
target...]`` (several inputs: all their targets, in input order). The fold over the input
targets skips dead terms; a result is dead iff all its terms are, and gets no bias."""
from __future__ import annotations

import math

import numpy as np

from ncdc.ir.operators import Linear

from ..registry import kernel, rule
from ..values import Value, any_over, finished, land


@rule(Linear)
def linear(b, inputs, ctx):
    W = ctx.param("weight")
    nout = len(b.output_weaves[0].target)
    if not inputs:
        y, live = W, None
    elif len(inputs) == 1:
        v = inputs[0]
        nin = len(b.input_weaves[0].target)
        y, live = contract(v.values, W, nin), _folded(v.live, nin, nout)
    else:
        operands, w_sub, lives, nxt = [], [], [], 0
        for k, v in enumerate(inputs):
            nin = len(b.input_weaves[k].target)
            sub = list(range(nxt, nxt + nin))
            nxt += nin
            operands += [v.values, [Ellipsis] + sub]
            w_sub += sub
            lives.append(_folded(v.live, nin, nout))
        out_sub = list(range(nxt, nxt + nout))
        y = np.einsum(*operands, W, w_sub + out_sub, [Ellipsis] + out_sub)
        live = land(*lives)
    if b.operator.bias:
        y = y + ctx.param("bias")
    return [finished(np.asarray(y), live)]


def contract(x, W, nin: int):
    """``y[*lead, *out] = sum_in x[*lead, *in] W[*in, *out]`` (``nin`` input target dims) as one
    matrix product."""
    if x.ndim == 2 and W.ndim == 2 and nin == 1:
        return x @ W
    n_in = math.prod(W.shape[:nin])
    return (x.reshape(-1, n_in) @ W.reshape(n_in, -1)).reshape(x.shape[:x.ndim - nin]
                                                               + W.shape[nin:])


def _folded(mask, nin: int, nout: int):
    """Liveness after folding the last ``nin`` dims, broadcast over ``nout`` output dims."""
    if mask is None:
        return None
    folded = any_over(mask, tuple(range(mask.ndim - nin, mask.ndim)))
    folded = folded.reshape(folded.shape[:folded.ndim - nin])
    return folded.reshape(folded.shape + (1,) * nout)


@kernel(Linear)
def linear_kernel(b, ctx):
    if len(b.input_weaves) != 1:
        return None
    nin = len(b.input_weaves[0].target)
    bias = b.operator.bias

    def run(xs, params):
        y = contract(xs[0], params["weight"], nin)
        return [y + params["bias"] if bias else y]

    return run


def linear_where(x: np.ndarray, W: np.ndarray, bias, live: np.ndarray, nin: int,
                 t: int) -> Value:
    """The rule on one all-live input with a bank weight (an axis ``A`` at output position
    ``t``), computed only where ``live[*lead, A]`` holds (the positions a later contraction
    reads, :mod:`interpreter.plan_demand`); elsewhere dead: one product per position of
    ``A`` over its live rows."""
    lead = np.broadcast_shapes(x.shape[:x.ndim - nin], live.shape[:-1])
    n_rows = math.prod(lead)
    n_in = math.prod(W.shape[:nin])
    out = W.shape[nin:]
    n_a = out[t]
    X = np.broadcast_to(x, lead + x.shape[x.ndim - nin:]).reshape(n_rows, n_in)
    L = np.broadcast_to(live, lead + (n_a,)).reshape(n_rows, n_a)
    Wa = np.moveaxis(W.reshape((n_in,) + out), 1 + t, 0)           # [A, in, *rest]
    rest = Wa.shape[2:]
    y = np.zeros((n_a, n_rows, math.prod(rest)), dtype=np.result_type(X, W))
    for a in range(n_a):
        rows = np.flatnonzero(L[:, a])
        if rows.size:
            y[a, rows] = X[rows] @ Wa[a].reshape(n_in, -1)
    y = np.moveaxis(y.reshape((n_a,) + lead + rest), 0, len(lead) + t)
    mask = L.reshape(lead + tuple(n_a if i == t else 1 for i in range(len(out))))
    if bias is not None:
        y = np.where(mask, y + bias, np.zeros((), y.dtype))
    if mask.all():
        mask = None
    return Value(y, mask)
