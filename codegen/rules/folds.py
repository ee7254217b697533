"""Sums of wires and folds over one target axis."""
from __future__ import annotations

from ncdc.ir.datatypes import kind
from ncdc.ir.errors import SpecError
from ncdc.ir.operators import AdditionOp, BitwiseXor, Maximum, Modulo
from ncdc.ir.rewrites import SinkShift

from .. import liveness
from ..operands import OpResult
from ..registry import rule


@rule(AdditionOp)
def addition(ctx):
    """Pointwise sum; a dead operand counts as 0 (it holds 0), dead only if all are."""
    if any(ctx.b.input_weaves[k].target for k in range(len(ctx.ops))):
        raise SpecError("AdditionOp operands must be rank 0 (all TILED)", ctx.b.path)
    out = ctx.spanned()
    terms = [ctx.aligned(k, out) for k in range(len(ctx.ops))]
    var = ctx.bind("total", " + ".join(terms), out)
    if any(o.live is None for o in ctx.ops) or not ctx.ops:
        return [OpResult(var, out)]
    pos = liveness.full(len(out)) & False
    sure = liveness.full(len(out)) & False
    for k in range(len(ctx.ops)):
        p, s = ctx.static_of(k, out)
        pos, sure = pos | p, sure | s
    if liveness.make(pos, sure) is None:
        return [OpResult(var, out)]
    live = ctx.bind(var + "_live", " | ".join(ctx.aligned_live(k, out)
                                            for k in range(len(ctx.ops))))
    return [OpResult(var, out, live, (pos, sure))]


def _fold_input(ctx, what: str):
    if len(ctx.ops) != 1:
        raise SpecError(f"{what} takes one input", ctx.b.path)
    o = ctx.ops[0]
    tl = [lab for lab in o.labels if lab[0] == "t"]
    if len(tl) != 1:
        raise SpecError(f"{what} folds exactly one target axis", ctx.b.path)
    keep = [lab for lab in o.labels if lab[0] != "t"]
    if len(set(o.labels)) == len(o.labels):
        dim = o.labels.index(tl[0]) - len(o.labels)
        return o, keep, tl, o.expr, o.live, dim
    src = ctx.aligned(0, keep + tl)
    live = ctx.aligned_live(0, keep + tl)
    return o, keep, tl, src, live, -1


def _fold_live(ctx, o, keep, tl, live, var, dim):
    if live is None:
        return [OpResult(var, keep)]
    st = ctx.fold_static(o.static, o.labels, tl, keep)
    if liveness.make(*st) is None:
        return [OpResult(var, keep)]
    live_var = ctx.bind(var + "_live", f"{live}.any(dim={dim})")
    var = ctx.bind(var, ctx.where_live(live_var, var), keep)
    return [OpResult(var, keep, live_var, st)]


@rule(Maximum)
def maximum(ctx):
    o, keep, tl, src, live, dim = _fold_input(ctx, "Maximum")
    if live is not None:
        lowest = "-math.inf" if kind(o.datatype) != "natural" else \
            "torch.iinfo(torch.long).min"
        src = ctx.bind("candidates", ctx.where_live(live, src, lowest))
    var = ctx.bind("maximum", f"{src}.amax(dim={dim})", keep)
    return _fold_live(ctx, o, keep, tl, live, var, dim)


@rule(BitwiseXor)
def bitwise_xor(ctx):
    """XOR of the live entries (dead ones hold 0, the identity)."""
    o, keep, tl, src, live, dim = _fold_input(ctx, "BitwiseXor")
    var = ctx.bind("hashed", f"functools.reduce(torch.bitwise_xor, {src}.unbind({dim}))", keep)
    return _fold_live(ctx, o, keep, tl, live, var, dim)


@rule(Modulo)
def modulo(ctx):
    if len(ctx.ops) != 2:
        raise SpecError("Modulo takes two inputs", ctx.b.path)
    out = ctx.spanned()
    a = ctx.aligned(0, out)
    d = ctx.aligned(1, out)
    live, static = ctx.product_live(out)
    if ctx.ops[1].live is not None:
        d = f"torch.where({ctx.aligned_live(1, out)}, {d}, 1)"
    var = ctx.bind("remainder", f"torch.remainder({a}, {d})", out)
    if live is None:
        return [OpResult(var, out)]
    live_var = ctx.bind(var + "_live", live)
    var = ctx.bind(var, ctx.where_live(live_var, var), out)
    return [OpResult(var, out, live_var, static)]


@rule(SinkShift)
def sink_shift(ctx):
    """``(x - M, s - M)`` with ``M`` the larger of the live row maximum and ``s``
    (``ir/rewrites.py``): the softmax with a sink then exponentiates nothing above 0. Dead
    entries of ``x - M`` hold -inf (``Wire.dead``): the exponential that reads them gives 0
    there without a ``where`` of its own."""
    o = ctx.ops[0]
    tl = [lab for lab in o.labels if lab[0] == "t"]
    if len(tl) != 1 or len(ctx.ops) != 2:
        raise SpecError("SinkShift takes a row over one target axis and a sink", ctx.b.path)
    rows = list(ctx.deg_labels)
    src = ctx.aligned(0, rows + tl)
    live = ctx.aligned_live(0, rows + tl)
    cand = src if live is None else ctx.bind("candidates",
                                             ctx.where_live(live, src, "-math.inf"))
    sink = ctx.aligned(1, rows)
    row_max = ctx.bind("row_max", f"{cand}.amax(dim=-1)", rows)
    shift = ctx.bind("shift", f"torch.maximum({row_max}, {sink})", rows)
    out = rows + [("o", 0, 0)]
    shifted = ctx.bind("shifted", f"{cand} - {shift}[..., None]", out)
    if live is None:
        first = OpResult(shifted, out)
    else:
        first = OpResult(shifted, out, live, (liveness.align(o.static[0], o.labels, rows + tl),
                                              liveness.align(o.static[1], o.labels, rows + tl)),
                         dead="-math.inf")
    sink_shifted = ctx.bind("sink_shifted", f"{sink} - {shift}", rows)
    return [first, OpResult(sink_shifted, rows)]
