"""Normalisations over the target axes: RMSNorm, L2 and L1 normalisation, (older) softmax."""
from __future__ import annotations

import sympy

from ncdc.ir.errors import SpecError
from ncdc.ir.operators import L1Norm, L2Norm, Normalize, SoftMax

from .. import liveness
from ..formula import FormulaPrinter
from ..members import ones, zeros
from ..operands import OpResult
from ..registry import rule

LEGACY_RMS_EPSILON = 1e-5
"""Older-generation ``Normalize`` (no epsilon field): RMSNorm with epsilon 1e-5, no gain."""


def _target(ctx, what):
    """The operand as it lies (normalising over its target dims wherever they are), unless a
    repeated label needs a diagonal first."""
    if len(ctx.ops) != 1:
        raise SpecError(f"{what} takes one input", ctx.b.path)
    o = ctx.ops[0]
    tl = [lab for lab in o.labels if lab[0] == "t"]
    keep = [lab for lab in o.labels if lab[0] != "t"]
    if not tl:
        raise SpecError(f"{what} needs target axes to normalise over", ctx.b.path)
    labels = list(o.labels) if len(set(o.labels)) == len(o.labels) else keep + tl
    src = ctx.aligned(0, labels)
    live = ctx.aligned_live(0, labels)
    dims = tuple(i - len(labels) for i, lab in enumerate(labels) if lab[0] == "t")
    dim = dims[0] if len(dims) == 1 else dims
    out = [("o", 0, lab[2]) if lab[0] == "t" else lab for lab in labels]
    return o, keep, tl, labels, src, live, dim, out


def _out_live(ctx, o, keep, tl, labels, live, var, out, fold: bool):
    """Dead positions stay dead (re-zeroed); with ``fold`` a row with no live entry is dead
    too (its statistic is undefined)."""
    if live is None:
        return [OpResult(var, out)]
    p = liveness.align(o.static[0], o.labels, labels)
    s = liveness.align(o.static[1], o.labels, labels)
    var = ctx.bind(var, ctx.where_live(live, var), out)
    return [OpResult(var, out, live, (p, s))]


@rule(Normalize)
def normalize(ctx):
    """RMSNorm over the target dims (LayerNorm when ``centred``, the pyncd reading):
    ``F.rms_norm`` / ``F.layer_norm`` where they are trailing and all live (the same function),
    else ``x / sqrt(mean(x^2) + eps)`` (after subtracting the mean when centred) over the live
    entries."""
    op = ctx.op
    o, keep, tl, labels, src, live, dim, out = _target(ctx, "Normalize")
    if live is None and labels[-len(tl):] == tl:
        norm = _rms_norm_module(ctx, tl, src)
        if norm is not None:
            return [OpResult(ctx.bind("normed", f"{norm}({src})", out), out)]
    if op.epsilon is None:
        eps = repr(LEGACY_RMS_EPSILON)
    elif _integral(op.epsilon):
        eps = ctx.size_code(op.epsilon)
    elif op.epsilon.is_Rational:
        eps = repr(float(op.epsilon))
    else:
        eps = _constant(ctx, op.epsilon)
    # the shape is an __init__ size: computed only for a parameter (a field-less Normalize may
    # normalise over a data-fixed size)
    shape = [ctx.init_size(ctx.axis(lab).size) for lab in tl] if op.gain or op.bias else None
    gain_base, shift_base = (("layer_norm_weight", "layer_norm_bias") if op.centred
                             else ("rms_norm_gain", "rms_norm_shift"))
    gain = ctx.param(gain_base, "gain", shape, ones) if op.gain else None
    trailing = labels[-len(tl):] == tl
    if live is None and trailing:
        sizes = ", ".join(ctx.size(lab) for lab in tl) + ("," if len(tl) == 1 else "")
        if op.centred:
            shift = ctx.param(shift_base, "shift", shape, zeros) if op.bias else None
            var = ctx.bind("normed", f"F.layer_norm({src}, ({sizes}), {gain or 'None'}, "
                           f"{shift or 'None'}, eps={eps})", out)
            return [OpResult(var, out)]
        code = f"F.rms_norm({src}, ({sizes}), {gain or 'None'}, {eps})"
    else:
        count = None
        if live is not None:
            count = ctx.bind("live_count",
                             f"{live}.expand_as({src}).sum(dim={dim}, keepdim=True)")
        # statistics in float32 at least (codegen/PRECISION.md): float16 squares overflow past
        # 256; the result is cast back once
        wide = ctx.bind("wide", f"{src}.to({ctx.wide_real()})", labels)
        if op.centred:  # LayerNorm: subtract the mean first
            mu = (f"{wide}.mean(dim={dim}, keepdim=True)" if live is None
                  else f"{wide}.sum(dim={dim}, keepdim=True) / {count}")
            wide = ctx.bind("centred", f"{wide} - {mu}" if live is None
                            else ctx.where_live(live, f"{wide} - {mu}"), labels)
        if live is None:
            mean = f"{wide}.pow(2).mean(dim={dim}, keepdim=True)"
        else:
            mean = f"{wide}.pow(2).sum(dim={dim}, keepdim=True) / {count}"
        code = f"({wide} / torch.sqrt({mean} + {eps})).to({src}.dtype)"
        if gain is not None:
            code = f"{code} * {gain}"
    if op.bias:
        shift = ctx.param(shift_base, "shift", shape, zeros)
        code = f"{code} + {shift}"
    var = ctx.bind("normed", code, out)
    return _out_live(ctx, o, keep, tl, labels, live, var, out, fold=True)


def _rms_norm_module(ctx, tl, src: str) -> str | None:
    """An ``nn.RMSNorm`` submodule (its ``weight`` the gain) for an RMSNorm with a gain, no
    shift, a constant epsilon, over trailing dims: ``F.rms_norm`` with the same arguments;
    None otherwise."""
    op = ctx.op
    if op.centred or not op.gain or op.bias:
        return None
    e = sympy.sympify(op.epsilon) if op.epsilon is not None else None
    if e is None:
        eps = repr(LEGACY_RMS_EPSILON)
    elif e.is_Rational:
        eps = repr(float(e))
    elif isinstance(e, sympy.Symbol):
        eps = ctx.init_symbol(e)
    else:
        return None
    dims = [ctx.init_size(ctx.axis(lab).size) for lab in tl]
    shape = dims[0] if len(dims) == 1 else "(" + ", ".join(dims) + ")"
    stem = src.removesuffix("_out") if src.isidentifier() else "rms"
    return ctx.cb.members.add_module(f"{stem}_norm", ctx.b, "gain",
                                     f"nn.RMSNorm({shape}, eps={eps})")


def _integral(expr) -> bool:
    return sympy.sympify(expr).is_Integer is True


def _constant(ctx, expr) -> str:
    return FormulaPrinter("x", ctx.symbol)(expr)


@rule(L2Norm)
def l2_norm(ctx):
    """``x / sqrt(sum x^2)`` over the target dims, summed in float32 at least
    (codegen/PRECISION.md); dead entries hold 0 and add nothing."""
    o, keep, tl, labels, src, live, dim, out = _target(ctx, "L2Norm")
    wide = ctx.bind("wide", f"{src}.to({ctx.wide_real()})", labels)
    code = f"({wide} / torch.sqrt({wide}.pow(2).sum(dim={dim}, keepdim=True))).to({src}.dtype)"
    var = ctx.bind("l2_normed", code, out)
    return _out_live(ctx, o, keep, tl, labels, live, var, out, fold=True)


@rule(L1Norm)
def l1_norm(ctx):
    o, keep, tl, labels, src, live, dim, out = _target(ctx, "L1Norm")
    if len(tl) != 1:
        raise SpecError("L1Norm normalises exactly one target axis", ctx.b.path)
    total = f"{src}.sum(dim={dim}, keepdim=True)"
    eps = ctx.op.epsilon
    if eps is not None and not (_integral(eps) and int(eps) == 0):
        total = f"{total} + {_constant(ctx, eps)}"
        code = f"{src} / ({total})"
    else:
        code = f"{src} / {total}"
    var = ctx.bind("l1_normed", code, out)
    return _out_live(ctx, o, keep, tl, labels, live, var, out, fold=True)


@rule(SoftMax)
def softmax(ctx):
    o, keep, tl, labels, src, live, dim, out = _target(ctx, "SoftMax")
    if live is not None:
        src = ctx.bind("logits", ctx.where_live(live, src, "-math.inf"), labels)
    if len(tl) == 1:
        code = f"torch.softmax({src}, dim={dim})"
    else:
        n = len(tl)
        src = ctx.aligned(0, keep + tl)
        out = keep + [("o", 0, lab[2]) for lab in tl]
        code = f"torch.softmax({src}.flatten({-n}), dim=-1).view_as({src})"
    var = ctx.bind("softmax", code, out)
    return _out_live(ctx, o, keep, tl, labels, live, var, out, fold=True)
