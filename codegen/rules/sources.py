"""Nullary sources that are not learned: fixed arrays and rotary tables."""
from __future__ import annotations

from ncdc.ir.datatypes import kind
from ncdc.ir.errors import SpecError
from ncdc.ir.operators import FixedArray, Rotary, YarnRotary

from ..formula import FormulaPrinter
from ..names import identifier
from ..operands import OpResult
from ..registry import rule


@rule(FixedArray)
def fixed_array(ctx):
    """A buffer: its values are not in the spec (load them with ``load_interpreter_params``)."""
    b, cb = ctx.b, ctx.cb
    out = [("o", 0, p) for p in range(len(b.output_weaves[0].target))]
    shape = [cb.init_size_code(ctx.axis(lab).size) for lab in out]
    shape_code = ", ".join(shape)
    if kind(b.output_weaves[0].datatype) == "natural":
        init = f"torch.ones({shape_code}, dtype=torch.long)"
    else:
        init = f"torch.zeros({shape_code})"
    base = identifier(ctx.op.label, "fixed") if ctx.op.label else "fixed"
    buf = cb.add_param(base, b, "fixed", init, False)
    return [OpResult(buf, out, full=False)]


@rule(Rotary, YarnRotary)
def rotary(ctx):
    """``F[x, t] = exp(i * stride * x * theta[t])``, ``theta[t] = base^(-t/|t|)`` (YaRN:
    ``theta[t] (1 - r[t] + r[t]/factor)``, ``r`` the clamped ramp); positions from 0."""
    b, cb, op = ctx.b, ctx.cb, ctx.op
    if ctx.ops:
        raise SpecError("a rotary table takes no input", b.path)
    tgt = b.output_weaves[0].target
    if len(tgt) != 2:
        raise SpecError("a rotary table has the target [positions, pairs]", b.path)
    init = FormulaPrinter("t", cb._init_symbol)
    pairs = cb.init_size_code(tgt[1].size)
    base = init(op.base)
    theta = (f"({base}) ** (-torch.arange({pairs}, dtype=torch.float64) / {pairs})")
    if isinstance(op, YarnRotary):
        lo, hi, factor = init(op.ramp_start), init(op.ramp_end), init(op.factor)
        cb.init_lines.append(" " * 8 + f"ramp = ((torch.arange({pairs}, dtype=torch.float64) - "
                             f"{lo}) / ({hi} - {lo})).clamp(0, 1)")
        theta = f"{theta} * (1 - ramp + ramp / {factor})"
    name = cb.add_table("theta", f"({theta}).to(torch.get_default_dtype())")
    stride = FormulaPrinter("x", cb._fwd_symbol)(op.position_stride)
    n_pos = cb.axis_size(tgt[0])
    positions = f"torch.arange({n_pos}, dtype={name}.dtype, device={name}.device)"
    if stride != "1":
        positions = f"{positions} * {stride}"
    out = [("o", 0, 0), ("o", 0, 1)]
    positions = ctx.bind("positions", positions, out[:1])
    angle = ctx.bind("angle", f"{positions}[:, None] * {name}", out)
    var = ctx.bind(identifier(op.label, "rotary") + "_table" if op.label else "rotary_table",
                   f"torch.polar(torch.ones_like({angle}), {angle})", out)
    return [OpResult(var, out, full=False)]
