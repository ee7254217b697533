"""Lowering of one ``Broadcasted`` (docs/format.md §9): read every input through its reindexing
(:mod:`codegen.reads`), let the operator's rule compute on the target dims (:mod:`codegen.rules`,
each seeing a :class:`codegen.ctx.Ctx`), place the results into the output weaves
(:mod:`codegen.place`) and round them to their storage format in emulate mode.
"""
from __future__ import annotations

import dataclasses

from ncdc.ir.datatypes import kind, storage_encoding
from ncdc.ir.errors import SpecError
from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.operators import BlockOperator, View
from ncdc.ir.rewrites import ContractionView
from ncdc.ir.storage import block_scale, output_format

from . import flips, formats
from .affine import affine_map, simple_source
from .ctx import Ctx
from .escapes import escape
from .names import comment_text
from .pairs import lower_on_pairs, wants_pairs
from .place import fusion_relabel, place
from .reads import read_operand
from .rules import RULES
from .rules.elementwise import reads_minus_infinity
from .wires import Wire, zeroed


def lower_broadcasted(cb, b: Broadcasted, wires: list[Wire], then: Broadcasted | None = None
                      ) -> list[Wire]:
    fn = RULES.get(type(b.operator))
    if fn is None:
        raise SpecError(f"no code generation rule for {type(b.operator).__name__}", b.path)
    if len(wires) != len(b.input_weaves):
        raise SpecError(f"{len(b.input_weaves)} input weaves but {len(wires)} inputs", b.path)
    keeps = then is None and isinstance(b.operator, (View, BlockOperator))  # codegen/flips.py
    on_pairs = wants_pairs(cb, b, wires)
    if on_pairs or not keeps:
        wires = [flips.plain(cb.fw, w) for w in wires]
    if any(w.dead != "0" for w in wires) and (on_pairs or not reads_minus_infinity(b.operator)):
        wires = [zeroed(cb.fw, w) for w in wires]
    if on_pairs:
        start = len(cb.fw.bound)
        outs = lower_on_pairs(cb, b, wires, then, fn)
        fresh = set(cb.fw.bound[start:])
        return [round_output(cb, b, j, w, w.var in fresh, wires) for j, w in enumerate(outs)]
    operands = [read_operand(cb, b, k, w, flips=keeps) for k, w in enumerate(wires)]
    operands = flips.settle_operands(cb.fw, b, operands)
    for k, w in enumerate(wires):  # a complex value held as real parts: read both alike
        if w.imag is not None:
            operands[k].imag = read_operand(cb, b, k, dataclasses.replace(w, var=w.imag)).expr
    start = len(cb.fw.bound)
    if then is None:
        ctx = Ctx(cb, b, operands)
        ctx.wires = list(wires)
        results = fn(ctx)
        outs = place(ctx, b, results)
        if any(r.imag is not None for r in results):
            parts = place(ctx, b, [dataclasses.replace(r, expr=r.imag or r.expr)
                                   for r in results])
            outs = [dataclasses.replace(w, imag=p.var if r.imag is not None else None)
                    for w, p, r in zip(outs, parts, results, strict=False)]
        if isinstance(b.operator, View):
            outs = [flips.view_output(b, operands[0], w) for w in outs]
            outs = [flips.plain(cb.fw, w) if flips.rounds_in_blocks(b, j, w) else w
                    for j, w in enumerate(outs)]
    else:
        ctx = Ctx(cb, b, operands, relabel=fusion_relabel(b, then), final=then)
        ctx.wires = list(wires)
        outs = place(ctx, then, fn(ctx), deg_tag="v")
    fresh = set(cb.fw.bound[start:])
    return [_round_parts(cb, b, j, w, fresh, wires) for j, w in enumerate(outs)]


def _round_parts(cb, b: Broadcasted, j: int, w: Wire, fresh: set, inputs: list[Wire]) -> Wire:
    """``round_output`` of a value, of both parts of one held as real parts."""
    if w.imag is None:
        return round_output(cb, b, j, w, w.var in fresh, inputs)
    real = round_output(cb, b, j, dataclasses.replace(w, imag=None), w.var in fresh, inputs)
    imag = round_output(cb, b, j, dataclasses.replace(w, var=w.imag, imag=None),
                        w.imag in fresh, [dataclasses.replace(x, var=x.imag or x.var)
                                          for x in inputs])
    return dataclasses.replace(real, imag=imag.var)


def round_output(cb, b: Broadcasted, j: int, w: Wire, fresh: bool,
                 inputs: list[Wire] = ()) -> Wire:
    dt = output_format(b, j)
    if dt is None or cb.gen.quant != "emulate":
        return w  # exact mode never rounds, so its code carries no rounding
    enc = storage_encoding(dt).value
    if kind(dt) == "natural" and enc == "INT64":
        return w
    w = zeroed(cb.fw, w)
    scale = block_scale(dt)
    if scale is not None and w.pairs is not None and w.rank < 2:
        escape(w.origins, "block-scaled rounding along the sparse axis")
    fmt = formats.key(enc, None if scale is None else str(scale.channels))
    if not fresh and formats.widens(cb.fw.held_in.get(w.var), fmt):
        return w  # a cast to a wider format of a value this forward rounded: the identity
    if fresh and inputs and formats.exact(b.operator) and all(
            formats.widens(cb.fw.held_in.get(x.var), fmt) for x in inputs):
        cb.fw.held_in[w.var] = fmt  # input values moved, or their magnitudes: the identity
        return w
    cb.gen.prelude.add("quant")
    rounding = cb.rounding(enc, None if scale is None else cb.size_code(scale.channels))
    note = f"held in {_format_text(dt)}"
    if fresh:
        cb.fw.round(w.var, rounding, note)
        cb.fw.held_in[w.var] = fmt
        return w
    name = "as_" + ("mxfp8" if scale is not None else enc.lower())
    var = cb.fw.bind(name, w.var, note, rounding)
    cb.fw.held_in[var] = fmt
    return dataclasses.replace(w, var=var, slot=None)


def _format_text(dt) -> str:
    return comment_text(str(dt), 40)


def lower_contraction_view(cb, m: ContractionView, wires: list[Wire]) -> list[Wire]:
    """``m`` as one einsum placing the contraction's result where the View puts it, so the
    contraction's own result (e.g. ``|e|x|e|`` for a per-expert ``Linear`` and its ``diag``)
    never exists; as the composition where a relabelled dim's axis differs in size from the
    dim it reads under this binding."""
    amap = affine_map(m.view.reindexings[0], constraints_ok=True)
    gen = cb.gen

    def sizes(axis):
        return gen.size(axis.size), gen.ref_size(axis.size)

    if any(simple_source(amap, j, sizes) is None for j in range(len(amap.cod))):
        for item in m.content:
            wires = cb.lower(item, wires)
        return wires
    return lower_broadcasted(cb, m.contraction, wires, then=m.view)
