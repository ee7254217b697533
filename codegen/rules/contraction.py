"""Einops (products and contractions), Linear (held weights), Embedding (table lookups)."""
from __future__ import annotations

from ncdc.ir.datatypes import Natural, kind, strip
from ncdc.ir.errors import SpecError
from ncdc.ir.names import plain_title
from ncdc.ir.operators import Einops, Embedding, Linear

from .. import liveness
from ..emit import align_code, atom
from ..fixed_data import user_data
from ..members import normal
from ..names import identifier
from ..operands import OpResult
from ..products import (
    contract,
    fold_live,
    group_labels,
    linear_module,
    linear_params,
    stored_linear,
)
from ..registry import rule


@rule(Einops)
def einops(ctx):
    relabelled = group_labels(ctx)
    groups = [g for labs in relabelled for g in labs if g[0] == "g"]
    groups = list(dict.fromkeys(groups))
    out = ctx.spanned()
    if not groups and not ctx.relabel and any(o.imag is not None for o in ctx.ops):
        return [_product_of_parts(ctx, relabelled, out)]
    if not groups and not ctx.relabel:
        # pointwise product of the aligned operands
        terms = []
        for k, o in enumerate(ctx.ops):
            terms.append(align_code(o.expr, relabelled[k], out))
        code = " * ".join(terms) if len(terms) > 1 else terms[0]
        live, static = ctx.product_live(out)
        name = "product"
        var = ctx.bind(name, code, out)
        if live is not None:
            live_var = ctx.bind(var + "_live", live)
            var = ctx.bind(var, ctx.where_live(live_var, var), out)
            return [OpResult(var, out, live_var, static)]
        return [OpResult(var, out)]
    # contraction: every group is summed
    if len(ctx.ops) == 1 and not ctx.relabel:
        labs = relabelled[0]
        dims = [i - len(labs) for i, lab in enumerate(labs) if lab[0] == "g"]
        keep = [lab for lab in labs if lab[0] != "g"]
        if len(set(labs)) == len(labs):
            dim = dims[0] if len(dims) == 1 else tuple(dims)
            code = f"{ctx.ops[0].expr}.sum(dim={dim})"
            outl = keep
        else:
            code, outl = contract(ctx, [(0, ctx.ops[0].expr, labs)], set(groups), "total")
    else:
        terms = [(k, o.expr, relabelled[k]) for k, o in enumerate(ctx.ops)]
        code, outl = contract(ctx, terms, set(groups), "contraction")
    var = ctx.bind("total" if len(ctx.ops) == 1 else "contraction", code, outl)
    live, static = fold_live(ctx, relabelled, groups, outl)
    if live is not None:
        live = ctx.bind(var + "_live", live)
    return [OpResult(var, outl, live, static)]


def _product_of_parts(ctx, relabelled, out) -> OpResult:
    """A pointwise product with complex operands held as real parts
    (``codegen/complex_parts.py``), term by term: ``(a + ib)(c + id) = (ac - bd) + i(ad + bc)``,
    each product rounded, then the sum, as the complex product rounds."""
    re, im = None, None
    for k, o in enumerate(ctx.ops):
        c = align_code(o.expr, relabelled[k], out)
        d = align_code(o.imag, relabelled[k], out) if o.imag is not None else None
        if re is None:
            re, im = c, d
        elif im is None and d is None:
            re = f"{re} * {atom(c)}"
        elif d is None:
            re, im = f"{re} * {atom(c)}", f"{im} * {atom(c)}"
        elif im is None:
            re, im = f"{re} * {atom(c)}", f"{re} * {atom(d)}"
        else:
            re, im = f"{re} * {atom(c)} - {im} * {atom(d)}", f"{re} * {atom(d)} + {im} * {atom(c)}"
        if 0 < k < len(ctx.ops) - 1 and im is not None:
            re, im = ctx.bind("product_re", re, out), ctx.bind("product_im", im, out)
    live, static = ctx.product_live(out)
    re, im = ctx.bind("product_re", re, out), ctx.bind("product_im", im, out)
    if live is None:
        return OpResult(re, out, imag=im)
    live_var = ctx.bind(re + "_live", live)
    re = ctx.bind(re, ctx.where_live(live_var, re), out)
    im = ctx.bind(im, ctx.where_live(live_var, im), out)
    return OpResult(re, out, live_var, static, imag=im)


@rule(Linear)
def linear(ctx):
    b = ctx.b
    for w in b.input_weaves:
        if isinstance(strip(w.datatype), Natural):
            raise SpecError("a Linear with a natural (selecting) input is not supported",
                            b.path, node_type="Linear")
    if len(ctx.ops) > 1:
        return _linear_several(ctx)
    in_labels = [("t", 0, p) for p in range(len(b.input_weaves[0].target))] if ctx.ops else []
    out_labels = [("o", 0, p) for p in range(len(b.output_weaves[0].target))]
    o = ctx.ops[0] if ctx.ops else None
    if (o is not None and in_labels and out_labels and ctx.pairs is None and not ctx.relabel
            and o.labels[-len(in_labels):] == in_labels and len(set(o.labels)) == len(o.labels)):
        # a matrix product over the flattened target axes: an nn.Linear
        layer = linear_module(ctx, in_labels, out_labels)
        x = o.expr if len(in_labels) == 1 else f"{atom(o.expr)}.flatten({-len(in_labels)})"
        code = f"{layer}({x})"
        if len(out_labels) > 1:
            sizes = ", ".join(ctx.size(lab) for lab in out_labels)
            code = f"{code}.unflatten(-1, ({sizes}))"
        labels = o.labels[:-len(in_labels)] + out_labels
        return _linear_live(ctx, o, in_labels, layer[5:] + "_out", code, labels)
    if o is not None and len(in_labels) > 1 and out_labels and ctx.pairs is None:
        # a product over several of the input's axes: torch.einsum would merge them in the
        # weight on every call (a copy), so the weight is stored as nn.Linear's [out, in]; one
        # over a single axis reads [in, out...] as it is (the pairs form's layout too)
        terms, bias, base = stored_linear(ctx, o, in_labels, out_labels)
        name = f"{base}_out"
        code, labels = contract(ctx, terms, set(in_labels), name)
        if bias is not None:
            code = f"{code} + {align_code(bias, [ctx.rel(lab) for lab in out_labels], labels)}"
        return _linear_live(ctx, o, in_labels, name, code, labels)
    weight, bias, base = linear_params(ctx, in_labels, out_labels)
    if not ctx.ops:
        labels = [ctx.rel(lab) for lab in out_labels]
        expr = weight
        if bias is not None:
            expr = ctx.bind(base, f"{weight} + {bias}", labels)
        return [OpResult(expr, labels, full=False)]
    o = ctx.ops[0]
    name = f"{base}_out"
    simple = (len(in_labels) == 1 and len(out_labels) == 1 and o.labels[-1:] == in_labels
              and not ctx.relabel and o.labels.count(in_labels[0]) == 1)
    trailing = (not ctx.relabel and len(in_labels) >= 1 and o.labels[-len(in_labels):] == in_labels
                and len(set(o.labels)) == len(o.labels))
    if simple:
        code = f"{o.expr} @ {weight}"
        labels = o.labels[:-1] + out_labels
    elif trailing:
        # the input's target dims are its last dims, in the weight's order: one matrix product
        code = f"torch.tensordot({o.expr}, {weight}, dims={len(in_labels)})"
        labels = o.labels[:-len(in_labels)] + out_labels
    else:
        code, labels = contract(ctx, [(0, o.expr, o.labels), (None, weight,
                                                               in_labels + out_labels)],
                                set(in_labels), name)
    if bias is not None:
        code = f"{code} + {align_code(bias, [ctx.rel(lab) for lab in out_labels], labels)}"
    return _linear_live(ctx, o, in_labels, name, code, labels)


def _linear_several(ctx):
    """``y[o] = sum x_1[in_1] ... x_n[in_n] W[in_1, ..., in_n, o] (+ b[o])``: one einsum of
    every operand with the weight; dead where some operand has no live entry (every term of
    the sum is then dead), as the interpreter reads it."""
    b = ctx.b
    if ctx.pairs is not None:
        raise SpecError("a Linear with several inputs in the pairs form is not supported",
                        b.path, node_type="Linear")
    in_labels = [("t", k, p) for k, w in enumerate(b.input_weaves) for p in range(len(w.target))]
    out_labels = [("o", 0, p) for p in range(len(b.output_weaves[0].target))]
    weight, bias, base = linear_params(ctx, in_labels, out_labels)
    name = f"{base}_out"
    terms = [(k, o.expr, o.labels) for k, o in enumerate(ctx.ops)]
    code, labels = contract(ctx, terms + [(None, weight, in_labels + out_labels)],
                            set(in_labels), name)
    if bias is not None:
        code = f"{code} + {align_code(bias, [ctx.rel(lab) for lab in out_labels], labels)}"
    var = ctx.bind(name, code, labels)
    lives, pos, sure = [], liveness.full(len(labels)), liveness.full(len(labels))
    for o in ctx.ops:
        if o.live is None:
            continue
        folded = [lab for lab in o.labels if lab in in_labels]
        keep = [lab for lab in o.labels if lab not in in_labels]
        fs = ctx.fold_static(o.static, o.labels, folded, keep)
        if liveness.make(*fs) is None:
            continue
        dims = tuple(i - len(o.labels) for i, lab in enumerate(o.labels) if lab in in_labels)
        lives.append(align_code(f"{o.live}.any(dim={dims if len(dims) > 1 else dims[0]})",
                                keep, labels))
        pos = pos & liveness.align(fs[0], keep, labels)
        sure = sure & liveness.align(fs[1], keep, labels)
    if not lives:
        return [OpResult(var, labels)]
    live = ctx.bind(var + "_live", " & ".join(lives))
    var = ctx.bind(var, ctx.where_live(live, var), labels)
    return [OpResult(var, labels, live, (pos, sure))]


def _linear_live(ctx, o, in_labels, name, code, labels):
    """Bind a Linear's result; dead where every input entry it reads is dead."""
    var = ctx.bind(name, code, labels)
    if o.live is None:
        return [OpResult(var, labels)]
    keep = [lab for lab in o.labels if lab not in in_labels]
    fs = ctx.fold_static(o.static, o.labels, in_labels, keep)
    if liveness.make(*fs) is None:
        return [OpResult(var, labels)]
    dims = tuple(i - len(o.labels) for i, lab in enumerate(o.labels) if lab in in_labels)
    kept = [ctx.rel(lab) for lab in keep]  # fused with the view after it: its degree labels
    live = ctx.bind(var + "_live", align_code(
        f"{o.live}.any(dim={dims if len(dims) > 1 else dims[0]})", kept, labels))
    var = ctx.bind(var, ctx.where_live(live, var), labels)
    st = (liveness.align(fs[0], kept, labels), liveness.align(fs[1], kept, labels))
    return [OpResult(var, labels, live, st)]


@rule(Embedding)
def embedding(ctx):
    b = ctx.b
    if len(ctx.ops) != 1:
        raise SpecError("an Embedding takes one index input", b.path)
    dt = strip(b.input_weaves[0].datatype)
    if not isinstance(dt, Natural):
        raise SpecError("an Embedding's input must be a natural index", b.path,
                        node_type="Embedding")
    if b.input_weaves[0].target:
        raise SpecError("an Embedding's index must be rank 0 (all TILED)", b.path)
    out_labels = [("o", 0, p) for p in range(len(b.output_weaves[0].target))]
    shape = [ctx.init_size(dt.max_value)] + [ctx.init_size(ctx.axis(lab).size)
                                             for lab in out_labels]
    base = (identifier(ctx.op.label, "embedding") if ctx.op.label else "embedding") + "_table"
    out_kind = kind(b.output_weaves[0].datatype)
    module = None
    if out_kind == "natural":
        table = user_data(ctx, base, "table", shape, b.output_weaves[0].datatype,
                          plain_title(ctx.op.label or base))
    elif len(shape) == 2 and (module := ctx.cb.members.add_module(
            base[:-6], b, "table", f"nn.Embedding({shape[0]}, {shape[1]})")):
        table = None  # an nn.Embedding: the spec's table and initialisation
    else:
        table = ctx.param(base, "table", shape, normal)
        table = ctx.cb.members.stored.get(table, table)  # stored: only the rows looked up
    o = ctx.ops[0]
    labels = o.labels + out_labels
    lookup = f"{module}({o.expr})" if table is None else f"{table}[{o.expr}]"
    var = ctx.bind(f"{base[:-6]}_rows", lookup, labels)
    if o.live is None:
        return [OpResult(var, labels)]
    live = align_code(o.live, o.labels, labels)
    live_var = ctx.bind(var + "_live", live)
    var = ctx.bind(var, ctx.where_live(live_var, var), labels)
    pos = liveness.align(o.static[0], o.labels, labels)
    sure = liveness.align(o.static[1], o.labels, labels)
    return [OpResult(var, labels, live_var, (pos, sure))]
