"""Selections: top-k, reading through a selection, index selection (FORMAT.md §11.16-18).

Top-k ranks the live entries of its one target axis (``torch.topk``; ties are not expected
on real data); the dense-k forms list picks in position order, as the reference does."""
from __future__ import annotations

from ir.datatypes import kind
from ir.errors import SpecError
from ir.operators import IndexSelect, Select, SelectionForm, TopK

from .. import liveness
from ..broadcast import OpResult
from ..emit import align_code
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
    kept = ctx.bind("kept", f"torch.topk({ranked}, min({k}, {ranked}.shape[-1]), "
                    "dim=-1).indices", note="positions of the k largest")
    p, s = ctx.static_of(0, keep + tl)
    k_ref = ctx.gen.ref_size(op.k)
    n_ref = ctx.ref(tl[0])
    sure = s if k_ref >= n_ref else (s & False)
    if op.form is SelectionForm.WEIGHTS:
        out = keep + [("o", 0, 0)]
        sel = f"torch.zeros_like({ranked}, dtype=torch.bool).scatter(-1, {kept}, True)"
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
    picks = ctx.bind("picks", f"{kept}.sort(dim=-1).values", note="in position order")
    results = []
    slot_live = None
    if live is not None:
        slot_live = ctx.bind("picks_live", f"torch.gather({live}.expand_as({src}), -1, "
                             f"{picks})")
    j = 0
    st = None
    if live is not None:
        any_p = p.any(axis=-1, keepdims=True)
        st = (any_p, any_p & False)
    if op.form in (SelectionForm.WEIGHTS_SELECT, SelectionForm.ONLY_WEIGHTS):
        var = ctx.bind("top_values", f"torch.gather({src}, -1, {picks})")
        if slot_live is not None:
            var = ctx.bind(var, ctx.where_live(slot_live, var))
        results.append(OpResult(var, keep + [("o", j, 0)], slot_live, st))
        j += 1
    if op.form in (SelectionForm.WEIGHTS_SELECT, SelectionForm.ONLY_SELECTION):
        positions = picks
        if len(ctx.ops) == 2:
            data = ctx.aligned(1, keep + [lab for lab in ctx.ops[1].labels if lab[0] == "t"],
                               expand=True)
            positions = ctx.bind("picked_positions", f"torch.gather({data}, -1, {picks})")
        if slot_live is not None:
            positions = ctx.bind("picked_positions", ctx.where_live(slot_live, positions))
        results.append(OpResult(positions, keep + [("o", j, 0)], slot_live, st))
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
        for k, o in enumerate(ctx.ops):
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
    raise SpecError("Select with positions held as data is not supported by the code "
                    "generator", b.path)


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
    idx = ctx.aligned(ki, out, expand=True)
    pl = ctx.aligned(pi, out + [("t", pi, 0)], expand=True)
    var = ctx.bind("picked", f"torch.gather({pl}, -1, {idx}[..., None])[..., 0]", out)
    live, static = ctx.product_live(out, [ki])
    if ctx.ops[pi].live is not None:
        raise SpecError("IndexSelect from a payload with dead positions is not supported by the "
                        "code generator", b.path)
    if live is None:
        return [OpResult(var, out)]
    lv = ctx.bind(var + "_live", live)
    var = ctx.bind(var, ctx.where_live(lv, var), out)
    return [OpResult(var, out, lv, static)]
