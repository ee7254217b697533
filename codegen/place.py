"""Placing a rule's labelled results into the output weaves of a ``Broadcasted`` (docs/format.md §9)."""
from __future__ import annotations

from ncdc.ir.arrays import TILED
from ncdc.ir.errors import SpecError
from ncdc.ir.morphisms import Broadcasted

from . import liveness
from .affine import affine_map
from .ctx import Ctx
from .emit import align_code
from .escapes import escape
from .names import comment_text, identifier
from .operands import OpResult
from .wires import Wire


def place(ctx: Ctx, b: Broadcasted, results: list[OpResult], deg_tag: str = "d") -> list[Wire]:
    cb = ctx.cb
    out = []
    if len(results) != len(b.output_weaves):
        raise SpecError(f"{type(b.operator).__name__} produced {len(results)} results for "
                        f"{len(b.output_weaves)} output weaves", b.path)
    for j, (res, weave) in enumerate(zip(results, b.output_weaves, strict=True)):
        dst = []
        d = 0
        t = 0
        for a in weave.shape:
            if a is TILED:
                dst.append((deg_tag, d))
                d += 1
            else:
                dst.append(("o", j, t))
                t += 1
        array = weave.fill(tuple(b.degree))
        if ctx.pairs is not None:
            dst = [ctx.pl(lab) for lab in dst]
            if ("p",) in dst or ("p",) in res.labels:
                out.append(_place_pairs(ctx, res, dst, array))
                continue
        full = res.full if res.full is not None else ctx.any_full()
        extra = [lab for lab in res.labels if lab not in dst]
        if extra:
            raise AssertionError(f"result labels {extra} not in output weave")
        code = align_code(res.expr, res.labels, dst)
        missing = [lab for lab in dst if lab not in res.labels]
        if missing:
            code = ctx.expand(code, dst, set(res.labels), full)
            if cb.lead() is not None:
                full = True
        static = None
        live = None
        if res.static is not None:
            sp = liveness.align(res.static[0], res.labels, dst)
            ss = liveness.align(res.static[1], res.labels, dst)
            static = liveness.make(sp, ss)
        if static is not None:
            live = align_code(res.live, res.labels, dst)
            if live != res.live:
                live = cb.fw.bind(identifier(res.live) if res.live.isidentifier() else "live",
                                  live)
        if code != res.expr:
            base = res.expr if res.expr.isidentifier() else "result"
            code = cb.fw.bind(base, code, "[" + ", ".join(
                comment_text(a.label, 20) for a in array.shape) + "]")
        out.append(Wire(code, array, live, static, full,
                        slot=res.slot if code == res.expr else None,
                        dead=res.dead if live is not None else "0"))
    return out


def _place_pairs(ctx: Ctx, res: OpResult, dst: list, array) -> Wire:
    """A result in pairs form: its dims must already be the output's, the pairs dim first."""
    if res.labels != dst or dst[0] != ("p",) or dst.count(("p",)) != 1 or res.live is not None:
        escape(ctx.pairs_origins, "a result that is not a plain pairs array")
    return Wire(res.expr, array, None, None, True, pairs=ctx.pairs, origins=ctx.pairs_origins)


def output_labels(b: Broadcasted, target: str) -> list:
    """Labels of ``b``'s output dims in order: ``("d", k)`` for the k-th tiled (broadcast) dim,
    ``(target, 0, k)`` for the k-th dim of the operator's own output."""
    labels, d, t = [], 0, 0
    for a in b.output_weaves[0].shape:
        if a is TILED:
            labels.append(("d", d))
            d += 1
        else:
            labels.append((target, 0, t))
            t += 1
    return labels


def fusion_relabel(b: Broadcasted, view: Broadcasted) -> dict:
    """Labels of ``b``'s output dims -> degree labels of the following view."""
    out_labels = output_labels(b, "o")
    amap = affine_map(view.reindexings[0])
    rel = {}
    for j, lab in enumerate(out_labels):
        i = next(i for i, s in enumerate(amap.rows[j]) if s != 0)
        rel[lab] = ("v", i)
    return rel
