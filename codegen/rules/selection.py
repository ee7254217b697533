"""Selections: top-k, reading through a selection, index selection (docs/format.md §11.16-18).

Top-k ranks the live entries of its one target axis as a stable descending sort does, so ties
go to the lower position as in the reference (interpreter/READINGS.md 13); the ``WEIGHTS`` form
keeps the picks in place (found with ``topk``'s k-th value and a count of the ties, no sort), the dense-k forms list them in position order with empty slots dead. ``Select`` with positions held as data and ``IndexSelect``
gather along the payload's axis: dead where the position is dead or names a dead entry."""
from __future__ import annotations

import numpy as np

from ncdc.ir.datatypes import kind
from ncdc.ir.errors import SpecError
from ncdc.ir.operators import IndexSelect, Select, SelectionForm, TopK

from .. import liveness
from ..emit import align_code
from ..operands import OpResult
from ..registry import rule


@rule(TopK)
def topk(ctx):
    b, cb, op = ctx.b, ctx.cb, ctx.op
    o = ctx.ops[0]
    tl = [lab for lab in o.labels if lab[0] == "t"]
    if len(tl) != 1 or b.input_weaves[0].target.__len__() != 1:
        raise SpecError("TopK ranks along exactly one target axis", b.path)
    keep = [lab for lab in o.labels if lab[0] != "t"]
    src = ctx.aligned(0, keep + tl)
    live = ctx.aligned_live(0, keep + tl)
    k = cb.size_code(op.k)
    ranked = src
    if live is not None:
        ranked = ctx.bind("ranked", ctx.where_live(live, src, "-math.inf"), keep + tl)
    p, s = ctx.static_of(0, keep + tl)
    k_ref = ctx.gen.ref_size(op.k)
    n_ref = ctx.ref(tl[0])
    sure = s if k_ref >= n_ref else (s & False)
    if op.form is SelectionForm.WEIGHTS:
        out = keep + [("o", 0, 0)]
        sel = _weights_kept(ctx, ranked, k, keep + tl)
        if live is not None:
            sel = f"{sel} & {live}"
        sel_var = ctx.bind("top_k_live", sel, out)
        var = ctx.bind("top_k", ctx.where_live(sel_var, src), out)
        st = (p, sure)
        if liveness.make(*st) is None:
            return [OpResult(var, out)]
        return [OpResult(var, out, sel_var, st)]
    if len(ctx.ops) > 2:
        raise SpecError("TopK takes a score input and optionally a positions input", b.path)
    return _dense_topk(ctx, src, live, keep, tl, ranked)


def _weights_kept(ctx, ranked, k, labels) -> str:
    """Code of the mask of the ``k`` largest entries of ``ranked`` along its last dim, as a
    stable descending sort keeps them (ties: the lower position first), without a sort: every
    entry above the k-th largest value, and of the entries equal to it the first ones, as many
    as are left (``topk`` finds the value only; ``cumsum`` counts the ties in position order)."""
    kth = ctx.bind("kth", f"{ranked}.topk(min({k}, {ranked}.shape[-1]), dim=-1).values[..., -1:]",
                   note="the k-th largest; ties: the lower position first")
    above = ctx.bind("above", f"{ranked} > {kth}", labels)
    tied = ctx.bind("tied", f"{ranked} == {kth}", labels)
    return f"{above} | {tied} & ({tied}.cumsum(-1) <= {k} - {above}.sum(-1, keepdim=True))"


def _dense_topk(ctx, src, live, keep, tl, ranked):
    """The dense-``k`` forms (``WEIGHTS_SELECT``, ``ONLY_WEIGHTS``, ``ONLY_SELECTION``): the
    kept entries (a stable descending sort: ties go to the lower position) listed in position
    order in ``k`` slots; slots with nothing to hold are dead (interpreter/READINGS.md 13)."""
    cb, op = ctx.cb, ctx.op
    k = cb.size_code(op.k)
    n_code = f"{src}.shape[-1]"
    order = ctx.bind("ranking", f"torch.sort({ranked}, dim=-1, descending=True, "
                     f"stable=True).indices[..., :{k}]", note="ties: the lower position first")
    chosen = f"torch.zeros_like({ranked}, dtype=torch.bool).scatter(-1, {order}, True)"
    if live is not None:
        chosen = f"{chosen} & {live}"
    chosen = ctx.bind("chosen", chosen)
    keyed = f"torch.where({chosen}, torch.arange({n_code}, device={src}.device), {n_code})"
    picks = ctx.bind("picks", f"{keyed}.sort(dim=-1).values[..., :{k}]",
                     note="kept positions in position order, empty slots last")
    k_ref, n_ref = ctx.gen.ref_size(op.k), ctx.ref(tl[0])
    if k_ref > n_ref or ctx.gen.size(op.k) > ctx.gen.size(ctx.axis(tl[0]).size):
        picks = ctx.bind("picks", f"F.pad({picks}, (0, {k} - {picks}.shape[-1]), "
                         f"value={n_code})", note="fewer entries than slots")
    slot_live = ctx.bind("picks_live", f"{picks} < {n_code}")
    picks = ctx.bind("picks", f"torch.where({slot_live}, {picks}, 0)")
    p, _ = ctx.static_of(0, keep + tl)
    any_p = p.any(axis=-1, keepdims=True)
    slots_p = np.broadcast_to(any_p, any_p.shape[:-1] + (k_ref,))
    if live is None:
        sure = np.broadcast_to(np.arange(k_ref) < n_ref, slots_p.shape)
    else:
        sure = slots_p & False
    st = (slots_p, sure)
    masked = liveness.make(*st) is not None
    results, j = [], 0
    if op.form in (SelectionForm.WEIGHTS_SELECT, SelectionForm.ONLY_WEIGHTS):
        var = ctx.bind("top_values", f"torch.gather({src}.expand({ranked}.shape), -1, {picks})")
        if masked:
            var = ctx.bind(var, ctx.where_live(slot_live, var))
            results.append(OpResult(var, keep + [("o", j, 0)], slot_live, st))
        else:
            results.append(OpResult(var, keep + [("o", j, 0)]))
        j += 1
    if op.form in (SelectionForm.WEIGHTS_SELECT, SelectionForm.ONLY_SELECTION):
        positions = picks
        if len(ctx.ops) == 2:
            data = ctx.aligned(1, keep + [lab for lab in ctx.ops[1].labels if lab[0] == "t"],
                               expand=True)
            positions = ctx.bind("picked_positions", f"torch.gather({data}, -1, {picks})")
            if masked:
                positions = ctx.bind("picked_positions", ctx.where_live(slot_live, positions))
        if masked:
            results.append(OpResult(positions, keep + [("o", j, 0)], slot_live, st))
        else:
            results.append(OpResult(positions, keep + [("o", j, 0)]))
    return results


@rule(Select)
def select(ctx):
    b = ctx.b
    kinds = [kind(w.datatype) for w in b.input_weaves]
    if len(ctx.ops) == 2 and kinds[0] != "natural":
        out = ctx.spanned() + [("o", 0, 0)]
        terms, lives = [], []
        pos = liveness.full(len(out))
        sure = liveness.full(len(out))
        for _k, o in enumerate(ctx.ops):
            labs = [("o", 0, 0) if lab[0] == "t" else lab for lab in o.labels]
            terms.append(align_code(o.expr, labs, out))
            if o.live is not None:
                lives.append(align_code(o.live, labs, out))
                pos = pos & liveness.align(o.static[0], labs, out)
                sure = sure & liveness.align(o.static[1], labs, out)
        var = ctx.bind("selected", " * ".join(terms), out)
        if not lives or liveness.make(pos, sure) is None:
            return [OpResult(var, out)]
        live = ctx.bind(var + "_live", " & ".join(lives))
        var = ctx.bind(var, ctx.where_live(live, var), out)
        return [OpResult(var, out, live, (pos, sure))]
    if len(ctx.ops) == 3 and kinds[1] == "natural" and kinds[0] != "natural":
        return [_weighted_gather(ctx)]
    if len(ctx.ops) == 2 and kinds[0] == "natural" and kinds[1] != "natural":
        out = ctx.spanned() + [("o", 0, 0)]
        idx, idx_live, idx_static = _slot_operand(ctx, 0, out)
        return [_gather(ctx, 1, out, idx, idx_live, idx_static)]
    raise SpecError(f"Select with {len(ctx.ops)} operands of kinds {', '.join(kinds)} is not "
                    "a known form (docs/format.md §11.17)", b.path)


def _slot_operand(ctx, k, out):
    """Operand ``k`` (target: the slot axis) aligned to ``out``, expanded; its live code and
    static liveness there (None, None where surely live)."""
    o = ctx.ops[k]
    labs = [("o", 0, 0) if lab[0] == "t" else lab for lab in o.labels]
    code = ctx.expand(align_code(o.expr, labs, out), out, set(labs), o.full)
    if o.live is None:
        return code, None, None
    static = (liveness.align(o.static[0], labs, out), liveness.align(o.static[1], labs, out))
    if liveness.make(*static) is None:
        return code, None, None
    return code, align_code(o.live, labs, out), static


def _gather(ctx, pi, out, idx, idx_live, idx_static, named=True):
    """``payload[..., idx]`` along the payload's one target axis, ``out``'s last dim the slots:
    dead where the position is dead or names a dead payload entry (docs/format.md §11.17-18)."""
    lead = out[:-1]
    pl = ctx.aligned(pi, lead + [("t", pi, 0)], expand=True)
    labels = out if named else None
    if idx_live is not None:
        idx = ctx.bind("positions", ctx.where_live(idx_live, idx), labels,
                       note="dead positions read entry 0")
    var = ctx.bind("picked", f"torch.gather({pl}, -1, {idx})", labels)
    pos = sure = liveness.full(len(out))
    if idx_static is not None:
        pos, sure = idx_static
    lives = [] if idx_live is None else [idx_live]
    if ctx.ops[pi].live is not None:
        pp, ps = ctx.static_of(pi, lead + [("t", pi, 0)])
        pos = pos & pp.any(axis=-1, keepdims=True)
        sure = sure & ps.all(axis=-1, keepdims=True)
        if liveness.make(pp, ps) is not None:
            pl_live = ctx.aligned_live(pi, lead + [("t", pi, 0)])
            lives.append(f"torch.gather({pl_live}.expand({pl}.shape), -1, {idx})")
    if liveness.make(pos, sure) is None or not lives:
        return OpResult(var, out)
    lv = ctx.bind(var + "_live", " & ".join(lives))
    var = ctx.bind(var, ctx.where_live(lv, var), labels)
    return OpResult(var, out, lv, (pos, sure))


def _weighted_gather(ctx):
    """``(w: R[k], pos: Nat<n>[k], p: R[n]) -> R[k]``: ``w[s] * p[pos[s]]``."""
    out = ctx.spanned() + [("o", 0, 0)]
    idx, idx_live, idx_static = _slot_operand(ctx, 1, out)
    g = _gather(ctx, 2, out, idx, idx_live, idx_static)
    w, w_live, w_static = _slot_operand(ctx, 0, out)
    var = ctx.bind("selected", f"{w} * {g.expr}", out)
    if w_live is None:
        return OpResult(var, out, g.live, g.static)
    pos, sure = w_static
    lives = [w_live]
    if g.live is not None:
        pos, sure = pos & g.static[0], sure & g.static[1]
        lives.append(g.live)
    lv = ctx.bind(var + "_live", " & ".join(lives))
    var = ctx.bind(var, ctx.where_live(lv, var), out)
    return OpResult(var, out, lv, (pos, sure))


@rule(IndexSelect)
def index_select(ctx):
    b = ctx.b
    kinds = [kind(w.datatype) for w in b.input_weaves]
    if len(ctx.ops) != 2 or "natural" not in kinds:
        raise SpecError("IndexSelect takes a natural index and a payload", b.path)
    ki = kinds.index("natural")
    pi = 1 - ki
    if b.input_weaves[ki].target or len(b.input_weaves[pi].target) != 1:
        raise SpecError("IndexSelect needs a rank-0 index and a rank-1 payload", b.path)
    out = ctx.spanned()
    if ctx.ops[pi].live is None:
        idx = ctx.aligned(ki, out, expand=True)
        pl = ctx.aligned(pi, out + [("t", pi, 0)], expand=True)
        var = ctx.bind("picked", f"torch.gather({pl}, -1, {idx}[..., None])[..., 0]", out)
        live, static = ctx.product_live(out, [ki])
        if live is None:
            return [OpResult(var, out)]
        lv = ctx.bind(var + "_live", live)
        var = ctx.bind(var, ctx.where_live(lv, var), out)
        return [OpResult(var, out, lv, static)]
    slot = ("o", 0, 0)
    idx = f"{ctx.aligned(ki, out, expand=True)}[..., None]"
    live, static = ctx.product_live(out, [ki])
    if static is not None:
        live = f"({live})[..., None]"
        static = tuple(a[..., None] for a in static)
    g = _gather(ctx, pi, out + [slot], idx, live, static, named=False)
    var = ctx.bind("picked", f"{g.expr}[..., 0]", out)
    if g.live is None:
        return [OpResult(var, out)]
    lv = ctx.bind(var + "_live", f"{g.live}[..., 0]")
    return [OpResult(var, out, lv, tuple(a[..., 0] for a in g.static))]
