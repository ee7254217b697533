"""Boxes: a block applied at every degree index (docs/format.md §9.2, §10.4, §10.5).

Each operand is laid out as ``[*degree, *target]`` (expanded where its reindexing drops a degree
axis) and the block runs on it with the degree as extra leading dims: lifting costs nothing
because every generated statement addresses dims from the right."""
from __future__ import annotations

import numpy as np

from ncdc.ir.errors import SpecError
from ncdc.ir.operators import BlockOperator, ParaBlockOperator

from .. import liveness
from ..emit import align_code
from ..operands import OpResult
from ..registry import rule
from ..wires import Wire


def _block_inputs(ctx, first: int, arrays) -> list[Wire]:
    deg = ctx.deg_labels
    wires = []
    for k in range(first, len(ctx.ops)):
        o = ctx.ops[k]
        tl = [ctx.pl(("t", k, p)) for p in range(len(ctx.b.input_weaves[k].target))]
        dst = deg + tl
        # missing degree dims stay size 1: the block broadcasts over them (expanding would
        # make einsum materialise copies)
        code = ctx.aligned(k, dst)
        if code != o.expr:
            code = ctx.bind("lifted" if deg else "operand", code, dst)
        live, static = None, None
        if o.live is not None:
            p, s = ctx.static_of(k, dst)
            nd = len(deg)
            # the block sees one degree index at a time: fold the degree conservatively
            if nd:
                p = p.any(axis=tuple(range(nd)))
                s = s.all(axis=tuple(range(nd)))
            static = liveness.make(p, s)
            if static is not None:
                live = ctx.aligned_live(k, dst)
                if live != o.live:
                    live = ctx.bind("lifted_live", live)
        if ("p",) in tl:  # a pairs array with the sparse axis in the block's own domain
            wires.append(Wire(code, arrays[k - first], None, None, True, pairs=ctx.pairs,
                              origins=ctx.pairs_origins))
            continue
        flipped = tuple(p for p in range(len(tl)) if ("t", k, p) in o.flipped)
        imag = None
        if o.imag is not None:  # codegen/complex_parts.py
            imag = align_code(o.imag, o.labels, dst)
            if imag != o.imag:
                imag = ctx.bind("lifted" if deg else "operand", imag, dst)
        wires.append(Wire(code, arrays[k - first], live, static, True, flipped=flipped,
                          imag=imag))
    return wires


def _results(ctx, outs: list[Wire]) -> list[OpResult]:
    deg = ctx.deg_labels
    res = []
    for j, w in enumerate(outs):
        labels = deg + [ctx.pl(("o", j, p)) for p in range(len(ctx.b.output_weaves[j].target))]
        static = None
        if w.static is not None:
            shape = (1,) * len(deg)
            static = (w.static.possible.reshape(shape + w.static.possible.shape),
                      w.static.sure.reshape(shape + w.static.sure.shape))
        res.append(OpResult(w.var, labels, w.live, static, full=w.full, imag=w.imag))
    return res


@rule(BlockOperator)
def block_operator(ctx):
    block = ctx.op.block
    if block is None:
        raise SpecError("a BlockOperator without its block", ctx.b.path)
    wires = _block_inputs(ctx, 0, list(block.dom))
    outs = ctx.run_block(block, wires, lifted=tuple(ctx.b.degree))
    return _results(ctx, outs)


@rule(ParaBlockOperator)
def para_block_operator(ctx):
    op, b = ctx.op, ctx.b
    block = op.block
    if ctx.deg_labels and (op.grabs or op.drops):
        raise SpecError("a ParaBlockOperator with tape ports lifted over a degree is not "
                        "supported by the code generator", b.path)
    n_grab = len(op.grabs)
    # bind the grabbed ports into the tape (they normally are the tape's value already)
    for g, _o, w in zip(op.grabs, ctx.ops[:n_grab], ctx.wires[:n_grab], strict=False):
        ctx.tape_write(g.tape, w)
    wires = _block_inputs(ctx, n_grab, list(block.dom))
    outs = ctx.run_block(block, wires, lifted=tuple(ctx.b.degree))
    res = _results(ctx, outs)
    for j, d in enumerate(op.drops):
        w = ctx.tape_read(d.tape, d.size, bind=False)
        jj = len(outs) + j
        labels = [("o", jj, p) for p in range(len(b.output_weaves[jj].target))]
        static = None
        if w.static is not None:
            static = (w.static.possible, w.static.sure)
        res.append(OpResult(w.var, labels, w.live, static, full=w.full, slot=w.slot))
    return res


__all__ = ["np"]
