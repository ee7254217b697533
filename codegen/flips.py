"""Dims held in reverse order, so that a window read backwards stays a view.

A read whose box dim moves backwards along its source (``[x, w|x]`` reading ``[x]`` at
``x - w``) is a view only in reverse order: torch strides are never negative. Such a read
(``affine_read(..., flip=False)``) yields a value whose dim is *flipped*: position ``n - 1 - i``
holds index ``i``, its liveness mask and static liveness laid out the same way
(:attr:`Wire.flipped`, :attr:`Operand.flipped`).

A flipped dim may travel only where its order cannot be observed:

* through a ``View`` (pure data movement: the flip moves with its dim);
* into a block call whose block is *equivariant* in the dim's axis (:func:`equivariant`):
  every operation that sees the axis treats its positions alike (elementwise arithmetic,
  format changes without block scales along it, sums, maxima, normalisations and contractions
  that pair it only with itself), so reversing the axis in every input reverses it in every
  output. The call passes the flipped window as it is (the callee's code is unchanged), flips
  the other inputs that carry the axis (small: a window's scores or masks) and restores the
  order of outputs that carry it.

Everywhere else the dim is restored first (:func:`plain`, ``Tensor.flip``: a copy), which is
what the read did before, so only windows that reach an equivariant block are never copied.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ncdc.ir.arrays import TILED
from ncdc.ir.morphisms import Broadcasted, Drop, Grab, ParaWrap, Truncated
from ncdc.ir.operators import (
    AdditionOp,
    Arithmetic,
    BlockOperator,
    Cast,
    Einops,
    Identity,
    L1Norm,
    Maximum,
    Normalize,
    SoftMax,
    TypeConvert,
    View,
)
from ncdc.ir.rewrites import SinkShift
from ncdc.ir.storage import block_scale, output_format
from ncdc.ir.walk import walk

from . import liveness
from .affine import affine_map
from .emit import atom
from .operands import Operand
from .place import output_labels
from .wires import Wire

# operators that treat the positions of every axis they see alike (Einops: see _einops_ok;
# SinkShift: a maximum over its axis subtracted, from ir.pipeline's normalized term)
SYMMETRIC = (AdditionOp, Arithmetic, BlockOperator, Cast, Einops, Identity, L1Norm, Maximum,
             Normalize, SinkShift, SoftMax, TypeConvert)


def _flip_static(static, axes):
    if static is None or not axes:
        return static
    flip = [np.flip(a, axis=tuple(axes)) if a.ndim else a for a in static]
    return tuple(np.ascontiguousarray(a) for a in flip)


def plain(fw, w: Wire) -> Wire:
    """``w`` with every dim in order (its flipped dims copied back)."""
    if not w.flipped:
        return w
    dims = tuple(p - w.rank for p in sorted(w.flipped))
    var = fw.bind(w.var if w.var.isidentifier() else "value",
                     f"{atom(w.var)}.flip({dims})", "dims back in order")
    live, static = w.live, w.static
    if static is not None:
        static = liveness.StaticLive(*_flip_static((static.possible, static.sure),
                                                   sorted(w.flipped)))
        live = fw.bind(w.live if w.live.isidentifier() else "live",
                          f"{atom(w.live)}.flip({dims})")
    return dataclasses.replace(w, var=var, live=live, static=static, flipped=(), slot=None)


def plain_operand(fw, o: Operand, keep=lambda lab: False) -> Operand:
    """``o`` with its flipped dims back in order, except the labels ``keep`` accepts."""
    undo = [lab for lab in o.flipped if not keep(lab)]
    if not undo:
        return o
    n = len(o.labels)
    pos = sorted(o.labels.index(lab) for lab in undo)
    dims = tuple(p - n for p in pos)
    expr = fw.bind("ordered", f"{atom(o.expr)}.flip({dims})", "dims back in order")
    live = o.live
    if live is not None:
        live = fw.bind("ordered_live", f"{atom(live)}.flip({dims})")
    return dataclasses.replace(o, expr=expr, live=live, static=_flip_static(o.static, pos),
                               flipped=o.flipped - set(undo))


def settle_operands(fw, b: Broadcasted, operands: list[Operand]) -> list[Operand]:
    """Operands whose flips the operator can take: a View keeps them all, a BlockOperator
    those of target dims (the call settles them); every other flip is undone."""
    if isinstance(b.operator, View):
        return operands
    if isinstance(b.operator, BlockOperator):
        return [plain_operand(fw, o, keep=lambda lab: lab[0] == "t") for o in operands]
    return [plain_operand(fw, o) for o in operands]


def view_output(b: Broadcasted, o: Operand, w: Wire) -> Wire:
    """The output wire of a ``View`` of the flipped operand ``o``: the same dims flipped."""
    if not o.flipped:
        return w
    dst = output_labels(b, "t")
    return dataclasses.replace(w, flipped=tuple(p for p, lab in enumerate(dst)
                                                if lab in o.flipped))


def rounds_in_blocks(b: Broadcasted, j: int, w: Wire) -> bool:
    """Whether output ``j``'s storage rounding groups the (flipped) last dim in blocks."""
    dt = output_format(b, j)
    return bool(w.flipped) and dt is not None and block_scale(dt) is not None \
        and w.rank - 1 in w.flipped


def axis_uids(arr) -> set:
    """The uids of ``arr``'s axes."""
    return {a.uid for a in arr.shape if a is not TILED}


def _einops_ok(b: Broadcasted, uids) -> bool:
    """Every contracted group that holds one of ``uids`` pairs that axis only with itself."""
    groups: dict = {}
    for weave, sig in zip(b.input_weaves, b.operator.signature, strict=False):
        for a, g in zip(weave.target, sig, strict=False):
            groups.setdefault(g, set()).add(a.uid)
    return all(len(axes) == 1 or not (axes & uids) for axes in groups.values())


def reads_plain(b: Broadcasted, uids) -> bool:
    """Every read that involves a degree axis in ``uids`` is a plain relabelling of it."""
    deg = list(b.degree)
    for rx in b.reindexings:
        amap = affine_map(rx, constraints_ok=True)
        for j, axis in enumerate(amap.cod):
            row, shift = amap.row(j)
            moved = [i for i, s in enumerate(row) if s != 0]
            touches = axis.uid in uids or any(deg[i].uid in uids for i in moved)
            if touches and not (len(moved) == 1 and row[moved[0]] == 1 and shift == 0
                                and deg[moved[0]].uid == axis.uid):
                return False
        if amap.constraints and any(deg[i].uid in uids for c in amap.constraints
                                    for i, s in enumerate(c.row) if s != 0):
            return False
    return True


def _site_ok(node, uids) -> bool:
    if isinstance(node, Truncated):
        return False
    if isinstance(node, (Grab, Drop)):
        return not (axis_uids(node.size) & uids)
    if isinstance(node, ParaWrap):  # tape ports carrying the axes
        ports = [a for a, g in zip(node.body.dom, node.grabs, strict=True) if g is not None]
        ports += [a for a, d in zip(node.body.cod, node.drops, strict=True) if d is not None]
        return not any(axis_uids(a) & uids for a in ports)
    if not isinstance(node, Broadcasted):
        return True
    arrays = [w.fill(tuple(node.degree))
              for w in list(node.input_weaves) + list(node.output_weaves)]
    if not any(axis_uids(a) & uids for a in arrays):
        return True
    if not isinstance(node.operator, SYMMETRIC) or not reads_plain(node, uids):
        return False
    if isinstance(node.operator, Einops) and not _einops_ok(node, uids):
        return False
    for j, weave in enumerate(node.output_weaves):
        dt = output_format(node, j)
        if dt is not None and block_scale(dt) is not None and weave.shape \
                and weave.fill(tuple(node.degree)).shape[-1].uid in uids:
            return False
    return True


def equivariant(gen, block, uids: frozenset) -> bool:
    """Whether reversing the axes ``uids`` in every input of ``block`` reverses them in every
    output and changes nothing else (memoised per block structure)."""
    cache = gen.__dict__.setdefault("_equivariant", {})
    key = (gen.key_of(block), uids)
    if key not in cache:
        ok = True
        try:
            ok = all(_site_ok(site.node, uids) for site in walk(block.body))
        except Exception:  # noqa: BLE001 - an unreadable map: not provably symmetric
            ok = False
        cache[key] = ok
    return cache[key]


def settle_call(gen, fw, block, wires: list[Wire],
                repeated: bool) -> tuple[list[Wire], frozenset]:
    """The arguments of a call of ``block`` and the axes they hold reversed: every flipped
    axis stays flipped (in every input that carries it) when the block is equivariant in it;
    otherwise the flips are undone."""
    uids = frozenset(w.array.shape[p].uid for w in wires for p in w.flipped)
    if not uids:
        return wires, uids
    if repeated or not equivariant(gen, block, uids):
        return [plain(fw, w) for w in wires], frozenset()
    out = []
    for w in wires:
        want = {p for p, a in enumerate(w.array.shape) if a.uid in uids}
        if set(w.flipped) != want:
            w = plain(fw, w)
            w = _flip(fw, w, sorted(want)) if want else w
        out.append(w)
    return out, uids


def _flip(fw, w: Wire, positions) -> Wire:
    """``w`` with the dims at ``positions`` reversed (marked flipped)."""
    dims = tuple(p - w.rank for p in positions)
    var = fw.bind(w.var if w.var.isidentifier() else "value",
                     f"{atom(w.var)}.flip({dims})", "in the window's reversed order")
    live, static = w.live, w.static
    if static is not None:
        static = liveness.StaticLive(*_flip_static((static.possible, static.sure), positions))
        live = fw.bind(w.live if w.live.isidentifier() else "live",
                          f"{atom(w.live)}.flip({dims})")
    return dataclasses.replace(w, var=var, live=live, static=static, flipped=tuple(positions),
                               slot=None)


def restore_outputs(fw, outs: list[Wire], uids: frozenset) -> list[Wire]:
    """Call results in order: dims of the reversed axes flipped back."""
    if not uids:
        return outs
    res = []
    for w in outs:
        pos = tuple(p for p, a in enumerate(w.array.shape) if a.uid in uids)
        if pos and w.pairs is None:
            w = plain(fw, dataclasses.replace(w, flipped=pos))
        res.append(w)
    return res
