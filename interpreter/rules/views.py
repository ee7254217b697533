"""Pure data movement (docs/format.md §11.13–§11.15): gathers and scatters.

* ``View`` / ``Identity``: the identity on each scalar — the Broadcasted's reindexing (already
  applied when the input was lifted) does the work, so a ``View`` result is usually a strided
  view of its input (no copy).
* ``CovariantView``: ``out[r(i)] = in[i]`` through its own ``StrideMorphism``; unwritten
  positions are dead; an input holding only the leading domain axes of ``r`` is broadcast over
  the rest; with no input the empty domain position writes 1.
* ``ConcatenateAxes``: each part written at ``offset_k + stride_k * j`` of the whole axis
  (covariant, unwritten positions dead); ``DeconcatenateAxes``: each part read from there
  (contravariant, out-of-range reads dead).
"""
from __future__ import annotations

import numpy as np

from ncdc.ir.operators import ConcatenateAxes, CovariantView, DeconcatenateAxes, Identity, View

from ..registry import rule
from ..reindex import affine_map, scatter
from ..values import Value, dtype_of, land


@rule(View, Identity)
def view(b, inputs, ctx):
    if len(inputs) != len(b.output_weaves):
        raise ctx.error(f"a {type(b.operator).__name__} maps each input to one output")
    return list(inputs)


@rule(CovariantView)
def covariant_view(b, inputs, ctx):
    op = b.operator
    amap = affine_map(op.reindexing, ctx.env)
    out_sizes = ctx.sizes(b.output_weaves[0].target)
    if len(out_sizes) != len(amap.cod_sizes) or tuple(out_sizes) != amap.cod_sizes:
        raise ctx.error("the reindexing's codomain is not the output target")
    if not inputs:
        one = np.ones((), dtype=dtype_of(b.output_weaves[0].datatype))
        return [scatter(Value(one, None), amap, out_sizes, 0)]
    (v,) = inputs
    nin = len(b.input_weaves[0].target)
    if nin > len(amap.dom_sizes):
        raise ctx.error("the input has more target axes than the reindexing's domain")
    return [scatter(v, amap, out_sizes, nin)]


def _part_geometry(b, k_weave, part, ctx, whole_weave):
    """(position of the part axis in the part weave's target, position of the whole axis in
    the whole weave's target, offset, stride)."""
    part_axis = part.dom_[0]
    row = part.rows[0]
    tgt_part = list(k_weave.target)
    tgt_whole = list(whole_weave.target)
    if part_axis not in tgt_part or row.axis not in tgt_whole:
        raise ctx.error(f"part axis {part_axis.label} / whole axis {row.axis.label} not in the "
                        "targets")
    return (tgt_part.index(part_axis), tgt_whole.index(row.axis), ctx.size(row.shift),
            ctx.size(row.strides[0]))


@rule(ConcatenateAxes)
def concatenate(b, inputs, ctx):
    op = b.operator
    wout = b.output_weaves[0]
    out_sizes = ctx.sizes(wout.target)
    if len(inputs) != len(op.part_reindexings):
        raise ctx.error(f"{len(inputs)} inputs for {len(op.part_reindexings)} parts")
    nt = len(out_sizes)
    lead = np.broadcast_shapes(*(v.values.shape[:v.values.ndim - nt] for v in inputs),
                               *(v.live.shape[:v.live.ndim - nt] for v in inputs
                                 if v.live is not None))
    dtype = np.result_type(*(v.values.dtype for v in inputs))
    out = np.zeros(lead + tuple(out_sizes), dtype=dtype)
    live = np.zeros(lead + tuple(out_sizes), dtype=bool)
    nlead = len(lead)
    for k, (v, part) in enumerate(zip(inputs, op.part_reindexings, strict=False)):
        pp, pw, off, stride = _part_geometry(b, b.input_weaves[k], part, ctx, wout)
        n = ctx.sizes(b.input_weaves[k].target)[pp]
        idx = off + stride * np.arange(n)
        ok = (idx >= 0) & (idx < out_sizes[pw])
        sel = [slice(None)] * (nlead + nt)
        sel[nlead + pw] = idx[ok]
        src = [slice(None)] * v.values.ndim
        src[v.values.ndim - nt + pp] = np.nonzero(ok)[0]
        vals = np.broadcast_to(v.values, lead + tuple(ctx.sizes(b.input_weaves[k].target)))
        out[tuple(sel)] = vals[tuple(src)]
        if v.live is None:
            live[tuple(sel)] = True
        else:
            lv = np.broadcast_to(v.live, lead + tuple(ctx.sizes(b.input_weaves[k].target)))
            live[tuple(sel)] = lv[tuple(src)]
    return [Value(out, None if live.all() else live)]


@rule(DeconcatenateAxes)
def deconcatenate(b, inputs, ctx):
    op = b.operator
    (v,) = inputs
    win = b.input_weaves[0]
    nt = len(win.target)
    whole = ctx.sizes(win.target)
    outs = []
    for k, part in enumerate(op.part_reindexings):
        wk = b.output_weaves[k]
        pp, pw, off, stride = _part_geometry(b, wk, part, ctx, win)
        n = ctx.sizes(wk.target)[pp]
        idx = off + stride * np.arange(n)
        ok = (idx >= 0) & (idx < whole[pw])
        axis = v.values.ndim - nt + pw
        vals = np.take(v.values, np.clip(idx, 0, whole[pw] - 1), axis=axis)
        live = None
        if v.live is not None:
            lv = v.live
            live = lv if lv.shape[axis] == 1 else np.take(lv, np.clip(idx, 0, whole[pw] - 1),
                                                           axis=axis)
        if not ok.all():
            shape = [1] * vals.ndim
            shape[axis] = n
            okb = ok.reshape(shape)
            vals = np.where(okb, vals, np.zeros((), vals.dtype))
            live = land(live, okb)
        if pp != pw:
            vals = np.moveaxis(vals, axis, v.values.ndim - nt + pp)
            if live is not None:
                live = np.moveaxis(live, axis, v.values.ndim - nt + pp)
        outs.append(Value(vals, live))
    return outs
