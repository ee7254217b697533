"""Selections (docs/format.md §11.16–§11.18).

``TopK`` ranks the live entries of its one target axis; ties go to the lower position (stable
order); with fewer than ``k`` live entries all of them are kept.

* ``WEIGHTS``: one output on the sparse axis ``k/n``: the kept values stay at their positions,
  every other position is dead.
* ``WEIGHTS_SELECT`` / ``ONLY_WEIGHTS`` / ``ONLY_SELECTION``: dense ``k``-slot outputs (values
  and/or natural positions) **in position order** (the indexer description: "the reference
  sorts picks into position order"); slots with nothing to hold are dead. With a second,
  natural operand (positions held as data) the positions output reads it.

``Select`` — WEIGHTS form ``(w: R[k/n], p: R[n]) -> R[k/n]``: ``w * p`` where ``w`` is live;
``(w: R[k], pos: Nat<n>[k], p: R[n]) -> R[k]``: ``w[s] * p[pos[s]]``; ``(pos: Nat<n>[k],
p: R[n]) -> R[k]``: ``p[pos[s]]``. ``IndexSelect``: ``payload[index]``, dead index -> dead.
A position outside the payload is an error.
"""
from __future__ import annotations

import numpy as np

from ncdc.ir.datatypes import kind
from ncdc.ir.operators import IndexSelect, Select, SelectionForm, TopK

from ..registry import rule
from ..values import Value, as_kind, finished, land


def _kept(x, live, k):
    """Bool mask of the k largest live entries along the last axis (ties: lower index)."""
    xm = x if live is None else np.where(live, x, -np.inf)
    xm = np.broadcast_to(xm, np.broadcast_shapes(x.shape, live.shape) if live is not None
                         else x.shape)
    n = xm.shape[-1]
    k = max(0, min(k, n))
    order = np.argsort(-xm, axis=-1, kind="stable")[..., :k]
    sel = np.zeros(xm.shape, dtype=bool)
    np.put_along_axis(sel, order, True, axis=-1)
    if live is not None:
        sel &= live
    return sel


@rule(TopK)
def topk(b, inputs, ctx):
    op = b.operator
    if len(b.input_weaves[0].target) != 1:
        raise ctx.error("TopK ranks along exactly one target axis")
    v = inputs[0]
    x = np.asarray(v.values, dtype=np.float64)
    k = ctx.size(op.k)
    sel = _kept(x, v.live, k)
    if op.form is SelectionForm.WEIGHTS:
        return [finished(np.where(sel, x, 0.0), sel)]
    n = sel.shape[-1]
    kk = min(k, n)
    pos = np.sort(np.where(sel, np.arange(n), n), axis=-1)[..., :kk]
    slot_live = pos < n
    pos_c = np.where(slot_live, pos, 0)
    if kk < k:
        pad = [(0, 0)] * (pos.ndim - 1) + [(0, k - kk)]
        pos_c, slot_live = np.pad(pos_c, pad), np.pad(slot_live, pad)
    values = np.take_along_axis(np.broadcast_to(x, sel.shape), pos_c, axis=-1)
    positions = pos_c
    if len(inputs) > 1:
        positions = np.take_along_axis(
            np.broadcast_to(as_kind(inputs[1].values, b.input_weaves[1].datatype), sel.shape),
            pos_c, axis=-1)
    outs = []
    if op.form in (SelectionForm.WEIGHTS_SELECT, SelectionForm.ONLY_WEIGHTS):
        outs.append(finished(values, slot_live))
    if op.form in (SelectionForm.WEIGHTS_SELECT, SelectionForm.ONLY_SELECTION):
        outs.append(finished(positions.astype(np.int64), slot_live))
    return outs


def _gather_positions(ctx, pos: Value, payload: Value, nat_dt):
    idx = as_kind(pos.values, nat_dt)
    if pos.live is not None:
        idx = np.where(pos.live, idx, 0)
    n = payload.values.shape[-1]
    if np.any((idx < 0) | (idx >= n)):
        bad = int(idx[(idx < 0) | (idx >= n)].flat[0])
        raise ctx.error(f"position {bad} is outside the payload axis of {n} entries")
    lead = np.broadcast_shapes(idx.shape[:-1], payload.values.shape[:-1])
    vals = np.take_along_axis(np.broadcast_to(payload.values, lead + payload.values.shape[-1:]),
                              np.broadcast_to(idx, lead + idx.shape[-1:]), axis=-1)
    live = pos.live
    if payload.live is not None:
        pl = np.broadcast_to(payload.live, lead + payload.live.shape[-1:])
        if pl.shape[-1] == 1:
            live = land(live, pl)
        else:
            live = land(live, np.take_along_axis(pl, np.broadcast_to(idx, lead + idx.shape[-1:]),
                                                 axis=-1))
    return vals, live


@rule(Select)
def select(b, inputs, ctx):
    kinds = [kind(w.datatype) for w in b.input_weaves]
    if len(inputs) == 2 and kinds[0] != "natural":
        w, p = inputs
        return [finished(w.values * p.values, land(w.live, p.live))]
    if len(inputs) == 3:
        w, pos, p = inputs
        vals, live = _gather_positions(ctx, pos, p, b.input_weaves[1].datatype)
        return [finished(w.values * vals, land(w.live, live))]
    if len(inputs) == 2:
        pos, p = inputs
        vals, live = _gather_positions(ctx, pos, p, b.input_weaves[0].datatype)
        return [finished(vals, live)]
    raise ctx.error(f"Select with {len(inputs)} operands is not a known form")


@rule(IndexSelect)
def index_select(b, inputs, ctx):
    kinds = [kind(w.datatype) for w in b.input_weaves]
    if len(inputs) != 2 or "natural" not in kinds:
        raise ctx.error("IndexSelect takes a natural index and a payload")
    ki = kinds.index("natural")
    idx, payload = inputs[ki], inputs[1 - ki]
    if b.input_weaves[ki].target or len(b.input_weaves[1 - ki].target) != 1:
        raise ctx.error("IndexSelect needs a rank-0 index and a rank-1 payload")
    pos = Value(idx.values[..., None], None if idx.live is None else idx.live[..., None])
    vals, live = _gather_positions(ctx, pos, payload, b.input_weaves[ki].datatype)
    return [finished(vals[..., 0], None if live is None else live[..., 0])]
