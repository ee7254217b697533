"""Nullary sources that are not learned (docs/format.md §11.12, §11.19).

* ``FixedArray``: its value (computed by rule or supplied; :mod:`interpreter.fixed`).
* ``ConstantOp``: ``value`` at every position; ``Arrange``: ``out[i] = i`` along its one
  target axis.
* ``Rotary``: ``F[i_x, i_t] = exp(i * position_stride * i_x * theta[i_t])`` with
  ``theta[i_t] = base^(-i_t / |t|)``, positions from 0, over the target ``[x, t]``.
* ``YarnRotary``: ``theta'[t] = theta[t] (1 - r[t] + r[t] / factor)`` with
  ``r[t] = clamp((t - ramp_start) / (ramp_end - ramp_start), 0, 1)`` (docs/format.md §11.19 as
  stated).
"""
from __future__ import annotations

import numpy as np

from ncdc.ir.operators import Arrange, ConstantOp, FixedArray, Rotary, YarnRotary

from ..registry import rule
from ..values import Value, dtype_of


@rule(FixedArray)
def fixed_array(b, inputs, ctx):
    return [Value(ctx.param("fixed"), None)]


@rule(ConstantOp)
def constant_op(b, inputs, ctx):
    w = b.output_weaves[0]
    value = ctx.number(b.operator.value)
    return [Value(np.full(ctx.sizes(w.target), value, dtype=dtype_of(w.datatype)), None)]


@rule(Arrange)
def arrange(b, inputs, ctx):
    (n,) = ctx.sizes(b.output_weaves[0].target)
    return [Value(np.arange(n, dtype=np.int64), None)]


def rotary_table(n_pos: int, n_pairs: int, base: float, stride: float, yarn=None):
    t = np.arange(n_pairs, dtype=np.float64)
    theta = base ** (-t / n_pairs)
    if yarn is not None:
        factor, lo, hi = yarn
        r = np.clip((t - lo) / (hi - lo), 0.0, 1.0)
        theta = theta * (1.0 - r + r / factor)
    x = np.arange(n_pos, dtype=np.float64)
    return np.exp(1j * stride * x[:, None] * theta[None, :])


@rule(Rotary, YarnRotary)
def rotary(b, inputs, ctx):
    op = b.operator
    tgt = b.output_weaves[0].target
    if len(tgt) != 2:
        raise ctx.error("a rotary table has the target [positions, pairs]")
    n_pos, n_pairs = ctx.sizes(tgt)
    yarn = None
    if isinstance(op, YarnRotary):
        yarn = (ctx.number(op.factor), ctx.number(op.ramp_start), ctx.number(op.ramp_end))
    table = rotary_table(n_pos, n_pairs, ctx.number(op.base), ctx.number(op.position_stride),
                         yarn)
    return [Value(table, None)]
