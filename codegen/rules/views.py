"""Pure data movement: gathers (``View``, ``DeconcatenateAxes``) and scatters (``CovariantView``,
``ConcatenateAxes``). The reindexing work of a ``View`` is done by the driver's operand read."""
from __future__ import annotations

import numpy as np

from ir.errors import SpecError
from ir.operators import ConcatenateAxes, CovariantView, DeconcatenateAxes, View

from .. import liveness
from ..affine import affine_map
from ..broadcast import OpResult
from ..emit import align_code, atom
from ..names import identifier
from ..registry import rule


@rule(View)
def view(ctx):
    if len(ctx.ops) != 1:
        raise SpecError("a View takes one input", ctx.b.path)
    o = ctx.ops[0]
    labels = [("o", 0, lab[2]) if lab[0] == "t" else lab for lab in o.labels]
    return [OpResult(o.expr, labels, o.live, o.static)]


def _rows(ctx, amap, cb, ref: bool):
    if ref:
        return [(tuple(ctx.gen.ref_size(s) for s in amap.rows[j]),
                 ctx.gen.ref_size(amap.shifts[j])) for j in range(len(amap.cod))]
    return "[" + ", ".join(
        "((" + ", ".join(cb.size_code(s) for s in amap.rows[j])
        + ("," if len(amap.rows[j]) == 1 else "") + f"), {cb.size_code(amap.shifts[j])})"
        for j in range(len(amap.cod))) + "]"


def _tuple(items) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


@rule(CovariantView)
def covariant_view(ctx):
    """``out[r(i)] = in[i]``; unwritten positions are dead; no input writes 1."""
    b, cb = ctx.b, ctx.cb
    if ctx.op.reindexing is None:
        raise SpecError("a CovariantView needs its reindexing", b.path)
    amap = affine_map(ctx.op.reindexing)
    out_t = [("o", 0, p) for p in range(len(b.output_weaves[0].target))]
    out_sizes = [ctx.axis(lab) for lab in out_t]
    if len(out_sizes) != len(amap.cod):
        raise SpecError("the CovariantView's reindexing does not produce the output target",
                        b.path)
    sizes_ref = [ctx.gen.ref_size(a.size) for a in out_sizes]
    sizes_code = _tuple([cb.axis_size(a) for a in out_sizes])
    name = identifier(ctx.op.label, "written") if ctx.op.label else "written"
    ctx.gen.prelude.add("views")
    if not ctx.ops:
        if amap.dom:
            raise SpecError("a CovariantView without input must have an empty domain", b.path)
        written = liveness.write(np.ones((), dtype=bool), (), _rows(ctx, amap, cb, True),
                                 sizes_ref)
        var = ctx.fw.names.fresh(name)
        live = ctx.fw.names.fresh(var + "_live")
        ctx.fw.emit(f"{var}, {live} = affine_write({cb.unit()}, {_rows(ctx, amap, cb, False)}, "
                    f"{sizes_code})", ctx.shape_comment(out_t) + " ones where written")
        if liveness.make(written, written) is None:
            return [OpResult(var, out_t, full=False)]
        return [OpResult(var, out_t, live, (written, written), full=False)]
    if len(ctx.ops) != 1:
        raise SpecError("a CovariantView takes at most one input", b.path)
    o = ctx.ops[0]
    in_t = [lab for lab in o.labels if lab[0] == "t"]
    keep = [lab for lab in o.labels if lab[0] != "t"]
    if len(in_t) != len(amap.dom):
        raise SpecError("the CovariantView's reindexing domain is not the input target", b.path)
    in_t = sorted(in_t, key=lambda lab: lab[2])
    src = ctx.aligned(0, keep + in_t)
    radix = _flatten_order(ctx, amap, in_t)
    labels = keep + out_t
    if radix is not None and o.live is None:
        code = align_code(src, keep + in_t, keep + radix) if radix != in_t else src
        var = ctx.bind(name, f"{atom(code)}.flatten({-len(in_t)})", labels)
        return [OpResult(var, labels)]
    rows_ref = _rows(ctx, amap, cb, True)
    box_ref = [ctx.gen.ref_size(ctx.axis(lab).size) for lab in in_t]
    pos = liveness.write(liveness.align(ctx.static_of(0, keep + in_t)[0], keep + in_t,
                                        keep + in_t), box_ref, rows_ref, sizes_ref)
    sure = liveness.write(liveness.align(ctx.static_of(0, keep + in_t)[1], keep + in_t,
                                         keep + in_t), box_ref, rows_ref, sizes_ref)
    var = ctx.fw.names.fresh(name)
    live = ctx.fw.names.fresh(var + "_live")
    ctx.fw.emit(f"{var}, {live} = affine_write({src}, {_rows(ctx, amap, cb, False)}, "
                f"{sizes_code})", ctx.shape_comment(labels))
    src_live = ctx.aligned_live(0, keep + in_t)
    if src_live is not None:
        ctx.fw.emit(f"{live} = {live} & affine_write({atom(src_live)}.expand({atom(src)}.shape), "
                    f"{_rows(ctx, amap, cb, False)}, {sizes_code})[0]")
    if liveness.make(pos, sure) is None:
        return [OpResult(var, labels)]
    return [OpResult(var, labels, live, (pos, sure))]


def _flatten_order(ctx, amap, in_t):
    """Input target labels major-to-minor when the single row flattens them (a bijection)."""
    if len(amap.cod) != 1 or amap.shifts[0] != 0 or not in_t:
        return None
    row = amap.rows[0]
    order = None
    for env in (ctx.gen.env, ctx.gen.ref_env):
        vals = [env.size(s) for s in row]
        if any(v <= 0 for v in vals):
            return None
        idx = sorted(range(len(row)), key=lambda i: -vals[i])
        stride = 1
        for i in reversed(idx):
            if vals[i] != stride:
                return None
            stride *= env.size(amap.dom[i].size)
        if stride != env.size(amap.cod[0].size):
            return None
        order = [in_t[i] for i in idx]
    return order


def _parts(ctx, reindexings):
    """(offset expr, part axis) per part, and whether they tile the whole axis in order."""
    parts = []
    for r in reindexings:
        amap = affine_map(r)
        if len(amap.dom) != 1 or len(amap.cod) != 1 or amap.rows[0][0] != 1:
            raise SpecError("each part reindexing must be a shift of one axis onto the whole",
                            ctx.b.path)
        parts.append((amap.shifts[0], amap.dom[0], amap.cod[0]))
    tiled = True
    for env in (ctx.gen.env, ctx.gen.ref_env):
        at = 0
        for shift, axis, whole in parts:
            if env.size(shift) != at:
                tiled = False
            at += env.size(axis.size)
        if at != env.size(parts[0][2].size):
            tiled = False
    return parts, tiled


@rule(ConcatenateAxes)
def concatenate(ctx):
    b = ctx.b
    parts, tiled = _parts(ctx, ctx.op.part_reindexings)
    if len(parts) != len(ctx.ops):
        raise SpecError("ConcatenateAxes needs one input per part", b.path)
    out = ctx.spanned()
    dst = out + [("o", 0, 0)]
    aligned = []
    for k, o in enumerate(ctx.ops):
        tl = [lab for lab in o.labels if lab[0] == "t"]
        if len(tl) != 1:
            raise SpecError("each ConcatenateAxes input has exactly its part as target", b.path)
        src = align_code(o.expr, [("o", 0, 0) if lab[0] == "t" else lab for lab in o.labels],
                         dst)
        aligned.append(ctx.expand(src, dst, set(o.labels) | {("o", 0, 0)}, o.full))
    if not tiled or ctx.masked():
        raise SpecError("ConcatenateAxes whose parts do not tile the whole axis (or carry dead "
                        "positions) is not supported by the code generator", b.path)
    var = ctx.bind("concatenated", f"torch.cat([{', '.join(aligned)}], dim=-1)", dst)
    return [OpResult(var, dst, full=ctx.any_full() or ctx.cb.lead() is not None)]


@rule(DeconcatenateAxes)
def deconcatenate(ctx):
    b, cb = ctx.b, ctx.cb
    parts, tiled = _parts(ctx, ctx.op.part_reindexings)
    if len(ctx.ops) != 1 or len(b.output_weaves) != len(parts):
        raise SpecError("DeconcatenateAxes takes one input and gives one output per part",
                        b.path)
    o = ctx.ops[0]
    tl = [lab for lab in o.labels if lab[0] == "t"]
    if len(tl) != 1:
        raise SpecError("DeconcatenateAxes cuts exactly one target axis", b.path)
    keep = [lab for lab in o.labels if lab[0] != "t"]
    src = ctx.aligned(0, keep + tl)
    live = ctx.aligned_live(0, keep + tl)
    results = []
    if tiled:
        sizes = ", ".join(cb.axis_size(axis) for _, axis, _ in parts)
        names = [ctx.fw.names.fresh(identifier(axis.label, "part")) for _, axis, _ in parts]
        ctx.fw.emit(f"{', '.join(names)} = torch.split({src}, [{sizes}], dim=-1)",
                    "parts of " + ctx.shape_comment(tl))
        exprs = names
    else:
        exprs = []
        for shift, axis, whole in parts:
            exprs.append(ctx.bind(identifier(axis.label, "part"),
                                  f"{atom(src)}.narrow(-1, {cb.size_code(shift)}, "
                                  f"{cb.axis_size(axis)})"))
    for j, ((shift, axis, whole), expr) in enumerate(zip(parts, exprs)):
        labels = keep + [("o", j, 0)]
        if live is None:
            results.append(OpResult(expr, labels))
            continue
        p, s = ctx.static_of(0, keep + tl)
        n = p.shape[-1]
        lo = ctx.gen.ref_size(shift)
        hi = lo + ctx.gen.ref_size(axis.size)
        ps = (p if n == 1 else p[..., lo:hi], s if n == 1 else s[..., lo:hi])
        if liveness.make(*ps) is None:
            results.append(OpResult(expr, labels))
            continue
        lv = ctx.bind(expr + "_live", f"{atom(live)}.expand({atom(src)}.shape).narrow(-1, "
                      f"{cb.size_code(shift)}, {cb.axis_size(axis)})")
        results.append(OpResult(expr, labels, lv, ps))
    return results
