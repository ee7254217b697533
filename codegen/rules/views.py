"""Pure data movement: gathers (``View``, ``DeconcatenateAxes``) and scatters (``CovariantView``,
``ConcatenateAxes``). The reindexing work of a ``View`` is done by the driver's operand read."""
from __future__ import annotations

import numpy as np

from ncdc.ir.errors import SpecError
from ncdc.ir.operators import ConcatenateAxes, CovariantView, DeconcatenateAxes, View

from .. import liveness
from ..affine import affine_map
from ..emit import align_code, atom
from ..names import identifier
from ..operands import OpResult
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
        ctx.fw.assign((var, live), f"affine_write({ctx.unit()}, {_rows(ctx, amap, cb, False)}, "
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
    ctx.fw.assign((var, live), f"affine_write({src}, {_rows(ctx, amap, cb, False)}, "
                  f"{sizes_code})", ctx.shape_comment(labels))
    src_live = ctx.aligned_live(0, keep + in_t)
    if src_live is not None:
        ctx.fw.assign(live, f"{live} & affine_write({atom(src_live)}.expand({atom(src)}.shape), "
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
    """(offset expr, part axis, whole axis, stride expr) per part, and whether they tile the
    whole axis in order (stride 1, back to back, covering it)."""
    parts = []
    for r in reindexings:
        amap = affine_map(r)
        if len(amap.dom) != 1 or len(amap.cod) != 1:
            raise SpecError(f"{type(ctx.op).__name__}: each part reindexing must map one axis "
                            "onto the whole", ctx.b.path)
        parts.append((amap.shifts[0], amap.dom[0], amap.cod[0], amap.rows[0][0]))
    tiled = True
    for env in (ctx.gen.env, ctx.gen.ref_env):
        at = 0
        for shift, axis, _whole, step in parts:
            if env.size(shift) != at or env.size(step) != 1:
                tiled = False
            at += env.size(axis.size)
        if at != env.size(parts[0][2].size):
            tiled = False
    return parts, tiled


def _part_rows(ctx, part, ref: bool):
    shift, _, _, step = part
    if ref:
        return [((ctx.gen.ref_size(step),), ctx.gen.ref_size(shift))]
    return f"[(({ctx.cb.size_code(step)},), {ctx.cb.size_code(shift)})]"


@rule(ConcatenateAxes)
def concatenate(ctx):
    b = ctx.b
    parts, tiled = _parts(ctx, ctx.op.part_reindexings)
    if len(parts) != len(ctx.ops):
        raise SpecError("ConcatenateAxes needs one input per part", b.path)
    out = ctx.spanned()
    dst = out + [("o", 0, 0)]
    aligned = []
    for _k, o in enumerate(ctx.ops):
        tl = [lab for lab in o.labels if lab[0] == "t"]
        if len(tl) != 1:
            raise SpecError("each ConcatenateAxes input has exactly its part as target", b.path)
        src = align_code(o.expr, [("o", 0, 0) if lab[0] == "t" else lab for lab in o.labels],
                         dst)
        aligned.append(ctx.expand(src, dst, set(o.labels) | {("o", 0, 0)}, o.full))
    if tiled and not ctx.masked():
        var = ctx.bind("concatenated", f"torch.cat([{', '.join(aligned)}], dim=-1)", dst)
        return [OpResult(var, dst, full=ctx.any_full() or ctx.cb.lead() is not None)]
    return _scatter_parts(ctx, parts, aligned, dst)


def _scatter_parts(ctx, parts, aligned, dst):
    """Each part written at ``offset_k + stride_k * j`` of the whole axis, later parts over
    earlier ones; unwritten positions and dead part entries are dead (docs/format.md §11.15)."""
    cb = ctx.cb
    whole = ctx.axis(("o", 0, 0))
    size_code = f"({cb.axis_size(whole)},)"
    n_ref = ctx.gen.ref_size(whole.size)
    ctx.gen.prelude.add("views")
    var = ctx.fw.names.fresh("concatenated")
    live = ctx.fw.names.fresh(var + "_live")
    pos = sure = None
    for k, (part, src) in enumerate(zip(parts, aligned, strict=False)):
        o = ctx.ops[k]
        labs = [("o", 0, 0) if lab[0] == "t" else lab for lab in o.labels]
        rows = _part_rows(ctx, part, False)
        box = [ctx.gen.ref_size(part[1].size)]
        written = liveness.write(np.ones(box, dtype=bool), box, _part_rows(ctx, part, True),
                                 [n_ref])
        p = s = written
        if o.static is not None:
            p = liveness.write(liveness.align(o.static[0], labs, dst), box,
                               _part_rows(ctx, part, True), [n_ref])
            s = liveness.write(liveness.align(o.static[1], labs, dst), box,
                               _part_rows(ctx, part, True), [n_ref])
        pos = p if pos is None else np.where(written, p, pos)
        sure = s if sure is None else np.where(written, s, sure)
        part_live = None
        if o.live is not None:
            part_live = f"{atom(align_code(o.live, labs, dst))}.expand({atom(src)}.shape)"
        if k == 0:
            ctx.fw.assign((var, live), f"affine_write({src}, {rows}, {size_code})",
                          ctx.shape_comment(dst) + f" part {part[1].label}")
            if part_live is not None:
                ctx.fw.assign(live, f"{live} & affine_write({part_live}, {rows}, "
                              f"{size_code})[0]")
            continue
        val_k = ctx.fw.names.fresh(identifier(part[1].label, "part"))
        at_k = ctx.fw.names.fresh(val_k + "_written")
        ctx.fw.assign((val_k, at_k), f"affine_write({src}, {rows}, {size_code})",
                      f"part {part[1].label}")
        ctx.fw.assign(var, f"torch.where({at_k}, {val_k}, {var})")
        if part_live is not None:
            ctx.fw.assign(live, f"torch.where({at_k}, affine_write({part_live}, {rows}, "
                          f"{size_code})[0], {live})")
        else:
            ctx.fw.assign(live, f"{live} | {at_k}")
    full = ctx.any_full() or cb.lead() is not None
    if liveness.make(pos, sure) is None:
        return [OpResult(var, dst, full=full)]
    return [OpResult(var, dst, live, (pos, sure), full=full)]


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
        sizes = ", ".join(cb.axis_size(part[1]) for part in parts)
        names = [ctx.fw.names.fresh(identifier(part[1].label, "part")) for part in parts]
        ctx.fw.assign(tuple(names), f"torch.split({src}, [{sizes}], dim=-1)",
                      "parts of " + ctx.shape_comment(tl))
        for j, (part, expr) in enumerate(zip(parts, names, strict=False)):
            results.append(_narrowed(ctx, src, live, keep, tl, j, part, expr))
        return results
    for j, part in enumerate(parts):
        shift, axis = part[0], part[1]
        if _inside(ctx, part):
            expr = ctx.bind(identifier(axis.label, "part"),
                            f"{atom(src)}.narrow(-1, {cb.size_code(shift)}, "
                            f"{cb.axis_size(axis)})")
            results.append(_narrowed(ctx, src, live, keep, tl, j, part, expr))
        else:
            results.append(_read_part(ctx, src, live, keep, tl, j, part))
    return results


def _inside(ctx, part) -> bool:
    """Whether the part is a stride-1 run inside the whole axis (a ``narrow``)."""
    shift, axis, whole, step = part
    for env in (ctx.gen.env, ctx.gen.ref_env):
        lo, n = env.size(shift), env.size(axis.size)
        if env.size(step) != 1 or lo < 0 or lo + n > env.size(whole.size):
            return False
    return True


def _narrowed(ctx, src, live, keep, tl, j, part, expr):
    shift, axis = part[0], part[1]
    labels = keep + [("o", j, 0)]
    if live is None:
        return OpResult(expr, labels)
    p, s = ctx.static_of(0, keep + tl)
    n = p.shape[-1]
    lo = ctx.gen.ref_size(shift)
    hi = lo + ctx.gen.ref_size(axis.size)
    ps = (p if n == 1 else p[..., lo:hi], s if n == 1 else s[..., lo:hi])
    if liveness.make(*ps) is None:
        return OpResult(expr, labels)
    lv = ctx.bind(expr + "_live", f"{atom(live)}.expand({atom(src)}.shape).narrow(-1, "
                  f"{ctx.cb.size_code(shift)}, {ctx.cb.axis_size(axis)})")
    return OpResult(expr, labels, lv, ps)


def _read_part(ctx, src, live, keep, tl, j, part):
    """A part read at ``offset + stride * j`` of the whole axis; reads outside are dead."""
    axis, whole = part[1], part[2]
    cb = ctx.cb
    labels = keep + [("o", j, 0)]
    rows = _part_rows(ctx, part, False)
    sizes = f"({cb.axis_size(axis)},)"
    ctx.gen.prelude.add("views")
    expr = ctx.fw.names.fresh(identifier(axis.label, "part"))
    lv = ctx.fw.names.fresh(expr + "_live")
    ctx.fw.assign((expr, lv), f"affine_read({src}, {rows}, {sizes})",
                  ctx.shape_comment(labels) + "; reads outside are dead")
    if live is not None:
        ctx.fw.assign(lv, f"{lv} & affine_read({atom(live)}.expand({atom(src)}.shape), "
                      f"{rows}, {sizes})[0]")
    p, s = ctx.static_of(0, keep + tl)
    extent = [ctx.gen.ref_size(whole.size)]
    box = [ctx.gen.ref_size(axis.size)]
    rows_ref = _part_rows(ctx, part, True)
    ps = (liveness.read(p, extent, rows_ref, box)[0], liveness.read(s, extent, rows_ref, box)[0])
    if liveness.make(*ps) is None:
        return OpResult(expr, labels)
    return OpResult(expr, labels, lv, ps)
