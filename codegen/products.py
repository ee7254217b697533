"""Einsum-shaped products shared by the contraction rules and the pairs form: Einops groups,
the liveness of a contraction, a Linear's weight and bias."""
from __future__ import annotations

from ncdc.ir.datatypes import kind
from ncdc.ir.errors import SpecError

from . import liveness
from .emit import align_code, atom
from .members import zeros
from .names import identifier


def contract(ctx, terms, folded, out_hint: str):
    """Einsum over labelled terms ``(operand index | None, code, labels)``; summed labels are
    those not in the output. Returns (code, out labels)."""
    rel = ctx.rel
    out = []
    for _k, _code, labels in terms:
        for lab in labels:
            r = rel(lab)
            if r not in out and lab not in folded and r[0] in ("d", "o", "v", "p"):
                out.append(r)
    if ctx.relabel:
        out = [lab for lab in [("v", i) for i in range(len(ctx.final.degree))] if lab in out] + \
            [lab for lab in out if lab[0] != "v"]
    else:
        out = [lab for lab in ctx.deg_labels if lab in out] + [lab for lab in out
                                                               if lab[0] == "o"]
    rel_terms = [(code, [rel(lab) for lab in labels], k is not None and ctx.ops[k].full)
                 for k, code, labels in terms]
    return ctx.einsum(rel_terms, out), out


def group_labels(ctx) -> list[list]:
    """Every Einops operand's labels with its target labels replaced by their group's
    ``("g", n)`` (the signature's numbering)."""
    sig = ctx.op.signature
    if len(sig) != len(ctx.ops):
        raise SpecError(f"Einops signature has {len(sig)} entries for {len(ctx.ops)} inputs",
                        ctx.b.path)
    relabelled = []
    for k, o in enumerate(ctx.ops):
        groups = sig[k]
        labs = []
        for lab in o.labels:
            if lab[0] == "t":
                if lab[2] >= len(groups):
                    raise SpecError(f"Einops signature entry {k} is shorter than the input's "
                                    "target", ctx.b.path)
                g = ("g", groups[lab[2]])
                ctx.group_axes.setdefault(g, ctx.axis(lab))
                labs.append(g)
            else:
                labs.append(lab)
        relabelled.append(labs)
    return relabelled


def fold_live(ctx, relabelled, groups, outl):
    """Liveness of a contraction: live iff some term (all factors live) is live."""
    ks = ctx.masked()
    if not ks:
        return None, None
    if ctx.relabel:
        raise AssertionError("fused contractions never carry masks")
    space = outl + groups
    pos = liveness.full(len(space))
    sure = liveness.full(len(space))
    codes = []
    for k in ks:
        o = ctx.ops[k]
        p = liveness.align(o.static[0], relabelled[k], space)
        s = liveness.align(o.static[1], relabelled[k], space)
        pos, sure = pos & p, sure & s
        codes.append(align_code(o.live, relabelled[k], space))
    axes = tuple(range(len(outl), len(space)))
    fp = pos.any(axis=axes) if axes else pos
    fs = sure.any(axis=axes) if axes else sure
    if liveness.make(fp, fs) is None:
        return None, None
    code = " & ".join(codes) if len(codes) > 1 else codes[0]
    if axes:
        dims = tuple(a - len(space) for a in axes)
        code = f"{atom(code)}.any(dim={dims if len(dims) > 1 else dims[0]})"
    return code, (fp, fs)


def linear_module(ctx, in_labels: list, out_labels: list) -> str:
    """Declare a Linear as an ``nn.Linear`` submodule over its flattened target axes; returns
    the code of the layer."""
    op, b = ctx.op, ctx.b
    if kind(b.output_weaves[0].datatype) == "complex":
        raise SpecError("complex Linear weights are not supported by the code generator",
                        b.path)
    ctx.use("linear")

    def flat(labels):
        return " * ".join(ctx.init_size(ctx.axis(lab).size) for lab in labels)

    return ctx.cb.members.add_linear(_weight_name(op), b, flat(in_labels), flat(out_labels),
                                     bool(op.bias), len(in_labels),
                                     [ctx.init_size(ctx.axis(lab).size) for lab in out_labels])


def _weight_name(op) -> str:
    return identifier(op.label, "weight") if op.label else "weight"


def stored_linear(ctx, o, in_labels: list, out_labels: list):
    """Declare a Linear's weight in ``nn.Linear``'s layout, ``[out, in]`` over the flattened
    target axes (PARAM_LAYOUT ``(len(in_labels), len(out_labels))``), for a product of input
    ``o`` that is not one matrix product: ``(einsum terms, bias code or None, base name)``.
    The weight enters as a view ``[out targets..., in]``; where the input's target axes are its
    last, in order, the input enters flattened the same way, so the contraction is one
    ``bmm``/``mm`` over the parameter as stored (a contraction over several unflattened axes
    would make ``torch.einsum`` copy the weight on every call); the bias is ``[out targets...]``."""
    op, b = ctx.op, ctx.b
    if kind(b.output_weaves[0].datatype) == "complex":
        raise SpecError("complex Linear weights are not supported by the code generator",
                        b.path)

    def flat(labels):
        return " * ".join(ctx.init_size(ctx.axis(lab).size) for lab in labels)

    base = _weight_name(op)
    weight = ctx.cb.members.add_param(
        base, b, "weight", [flat(out_labels), flat(in_labels)],
        lambda p: f"nn.init.normal_({p}, std={p}.shape[1] ** -0.5)",
        layout=(len(in_labels), len(out_labels)))
    n = len(in_labels)
    x, x_labels, w_in = o.expr, o.labels, in_labels
    if n > 1 and o.labels[-n:] == in_labels and len(set(o.labels)) == len(o.labels):
        x, x_labels, w_in = f"{atom(o.expr)}.flatten({-n})", o.labels[:-n] + in_labels[:1], \
            in_labels[:1]
    if len(out_labels) > 1 or len(w_in) > 1:
        sizes = [ctx.size(lab) for lab in out_labels] + (
            ["-1"] if len(w_in) == 1 else [ctx.size(lab) for lab in w_in])
        weight = f"{weight}.view({', '.join(sizes)})"
    bias = None
    if op.bias:
        bias = ctx.param(base + "_bias", "bias", [ctx.init_size(ctx.axis(lab).size)
                                                  for lab in out_labels], zeros)
    return [(0, x, x_labels), (None, weight, out_labels + w_in)], bias, base


def linear_params(ctx, in_labels: list, out_labels: list):
    """Declare a Linear's weight ``[in targets..., out target...]`` (and bias ``[out target]``)
    as parameters of the class: ``(weight code, bias code or None, base name)``."""
    op, b = ctx.op, ctx.b
    in_axes = [ctx.axis(lab) for lab in in_labels]
    out_axes = [ctx.axis(lab) for lab in out_labels]
    shape = [ctx.init_size(a.size) for a in in_axes + out_axes]
    base = _weight_name(op)
    if kind(b.output_weaves[0].datatype) == "complex":
        raise SpecError("complex Linear weights are not supported by the code generator",
                        b.path)
    if in_labels:
        n_in = len(in_axes)

        def init(p):
            fan = f"{p}.shape[0]" if n_in == 1 else f"math.prod({p}.shape[:{n_in}])"
            return f"nn.init.normal_({p}, std={fan} ** -0.5)"
    else:
        def init(p):
            return f"nn.init.zeros_({p})"
    weight = ctx.param(base, "weight", shape, init)
    bias = None
    if op.bias:
        bias = ctx.param(base + "_bias", "bias", [ctx.init_size(a.size) for a in out_axes],
                         zeros)
    return weight, bias, base
