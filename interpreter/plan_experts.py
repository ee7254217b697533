"""Experts first: a gated part run once per routed position of its sparse axis, over the rows
routed there, so that each position's parameters are read once per call (used by
``plan._Builder.chunked`` where row chunks would read them once per chunk).

The pattern is :mod:`interpreter.plan_demand`'s: ``sum_A g[A] * Y[A, ...]`` over a sparse
axis ``A`` (``k/e``), the part computing ``Y`` position-wise in ``A``. Then ``Y[.., a, ..]``
depends only on position ``a`` of the part's parameters (only a ``Linear`` may carry ``A``,
in its output target), and the contraction is a sum over ``a`` of terms each read from one
position. So the part and its contraction are compiled once more with ``A`` of size 1
(:func:`narrowed`: the same terms, every occurrence of ``A`` sized 1) and run, for each
position ``a`` live in some row of the gate, on the rows where it is live (every lifted
position flattened into one row dim), with every parameter carrying ``A`` sliced at ``a``
(:class:`SlicedParams`). Each run's result is added into its rows, positions in ascending
order (the order in which the dense contraction sums them); a row with no live position is
dead, as the contraction over all-dead terms. Unread positions are never computed: an unrouted
expert's weights are never read.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import sympy

from ncdc.ir.axes import Axis
from ncdc.ir.operators import Linear

from .values import Value


def narrowed(terms: tuple, A: Axis) -> tuple[tuple, dict]:
    """``terms`` with every occurrence of ``A`` replaced by the same axis of size 1, and
    ``{id(new): old}`` for every object rebuilt (a site's parameters are keyed by the old
    site; blocks by their old ids). Objects without ``A`` are shared, not copied."""
    one = dataclasses.replace(A, size=sympy.Integer(1))
    memo: dict[int, object] = {}
    origin: dict[int, object] = {}

    def sub(obj):
        hit = memo.get(id(obj), memo)
        if hit is not memo:
            return hit
        if isinstance(obj, Axis) and obj == A:
            out = one
        elif isinstance(obj, (tuple, list)):
            items = [sub(x) for x in obj]
            out = obj if all(a is b for a, b in zip(items, obj, strict=True)) else type(obj)(items)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            changed = {}
            for f in dataclasses.fields(obj):
                v = getattr(obj, f.name)
                nv = sub(v)
                if nv is not v:
                    changed[f.name] = nv
            out = dataclasses.replace(obj, **changed) if changed else obj
            if out is not obj:
                origin[id(out)] = obj
        else:
            out = obj
        memo[id(obj)] = out
        return out

    return tuple(sub(t) for t in terms), origin


def param_slices(site, A: Axis) -> dict[str, tuple[int, ...]] | None:
    """The positions of ``A`` in each parameter (by role) of ``site`` (a ``Linear``: weight
    ``[in targets..., out target...]``, bias ``[out target...]``); None when ``A`` lies in the
    arrays of an operator of another kind (no slicing rule: not run experts first)."""
    op = site.operator
    if not isinstance(op, Linear):
        weaves = tuple(site.input_weaves) + tuple(site.output_weaves)
        return None if any(A in w.target for w in weaves) else {}
    w_axes = [a for w in site.input_weaves for a in w.target]
    out = list(site.output_weaves[0].target) if site.output_weaves else []
    found = {"weight": tuple(i for i, a in enumerate(w_axes + out) if a == A)}
    if op.bias:
        found["bias"] = tuple(i for i, a in enumerate(out) if a == A)
    return {role: pos for role, pos in found.items() if pos}


class SlicedParams:
    """The parameters as the narrowed plan reads them: ``params[key]`` with every position of
    ``A`` (``slices[key]``) cut to ``at:at + 1``; other keys as they are. :meth:`fetch` reads
    each of ``keys`` from ``params`` once a call, in order (as the row plan would), and the
    runs read those arrays."""

    def __init__(self, params, slices: dict[str, tuple[int, ...]], keys=()):
        self.params, self.slices, self.keys = params, slices, tuple(keys)
        self.arrays: dict = {}
        self.at = 0

    def fetch(self) -> None:
        self.arrays = {key: self.params[key] for key in self.keys}

    def __getitem__(self, key):
        arr = self.arrays[key] if key in self.arrays else self.params[key]
        pos = self.slices.get(key)
        if not pos:
            return arr
        idx = [slice(None)] * arr.ndim
        for p in pos:
            idx[p] = slice(self.at, self.at + 1)
        return arr[tuple(idx)]


def _flat(v: Value, batch, n: int) -> Value:
    """``v`` with its leading ``batch`` dims (possibly size 1) as one dim of ``n`` rows."""
    nb = len(batch)
    x = v.values
    vals = np.broadcast_to(x, tuple(batch) + x.shape[nb:]).reshape((n,) + x.shape[nb:])
    if v.live is None:
        return Value(vals, None)
    lv = v.live
    return Value(vals, np.broadcast_to(lv, tuple(batch) + lv.shape[nb:]).reshape(
        (n,) + lv.shape[nb:]))


def _rows(v: Value, r) -> Value:
    x, lv = v.values, v.live
    return Value(x if x.shape[0] == 1 else x[r],
                 None if lv is None else lv if lv.shape[0] == 1 else lv[r])


def run_by_position(plan, params: SlicedParams, operands: list[Value], gate: Value, batch,
                    out_shape: tuple[int, ...], rows: int) -> Value | None:
    """The contraction's result over ``batch`` by the narrowed ``plan`` (inputs: the
    ``operands``, then the gate at one position), position by position of the gate's last
    dim, at most ``rows`` rows a run; None when no position is live anywhere (the caller
    runs the whole part)."""
    batch = tuple(batch)
    n = math.prod(batch)
    g = _flat(gate, batch, n)
    n_a = g.values.shape[-1]
    G = np.broadcast_to(g.values, (n, n_a))
    L = np.ones((n, n_a), bool) if g.live is None else np.broadcast_to(g.live, (n, n_a))
    if not L.any():
        return None
    ops = [_flat(v, batch, n) for v in operands]
    out, hit, live = None, np.zeros(n, bool), None
    params.fetch()
    for a in np.flatnonzero(L.any(0)):
        params.at = int(a)
        idx = np.flatnonzero(L[:, a])
        for s in range(0, idx.size, rows):
            r = idx[s:s + rows]
            (y,) = plan.run([_rows(v, r) for v in ops] + [Value(G[r, a:a + 1], None)])
            vals = np.broadcast_to(y.values, (r.size,) + out_shape)
            if out is None:
                out = np.zeros((n,) + out_shape, vals.dtype)
            elif vals.dtype != out.dtype:
                out = out.astype(np.result_type(out, vals))
            out[r] += vals
            if y.live is not None and live is None:
                live = np.zeros((n,) + out_shape, bool)
                live[hit] = True
            if live is not None:
                live[r] |= True if y.live is None else np.broadcast_to(y.live, vals.shape)
            hit[r] = True
    params.arrays = {}
    if live is None and not hit.all():
        live = np.broadcast_to(hit.reshape((n,) + (1,) * len(out_shape)),
                               (n,) + out_shape).copy()
    shape = batch + out_shape
    return Value(out.reshape(shape), None if live is None or live.all() else live.reshape(shape))
