"""Nullary sources that are not learned: fixed arrays and rotary tables."""
from __future__ import annotations

from ncdc.ir.datatypes import kind
from ncdc.ir.errors import SpecError
from ncdc.ir.operators import FixedArray, Rotary, YarnRotary

from ..broadcast import OpResult
from ..dtypes import complex_dtype, device
from ..formula import FormulaPrinter
from ..names import identifier
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
    fwd = FormulaPrinter("t", cb._fwd_symbol)
    pairs = cb.size_code(tgt[1].size)
    dev = device(cb)
    where = f", device={dev}" if dev else ""
    f64 = f"dtype=torch.float64{where}"
    # the table is computed in forward, in float64 (PRECISION.md): it follows the input's device
    # and dtype, and ``.double()`` gives float64-exact angles
    theta = f"{fwd(op.base)} ** (-torch.arange({pairs}, {f64}) / {pairs})"
    if isinstance(op, YarnRotary):
        lo, hi, factor = fwd(op.ramp_start), fwd(op.ramp_end), fwd(op.factor)
        ramp = ctx.bind("ramp", f"((torch.arange({pairs}, {f64}) - {lo}) / ({hi} - {lo}))"
                        f".clamp(0, 1)", [("o", 0, 1)])
        theta = f"{theta} * (1 - {ramp} + {ramp} / {factor})"
    name = ctx.bind("theta", theta, [("o", 0, 1)])
    stride = FormulaPrinter("x", cb._fwd_symbol)(op.position_stride)
    n_pos = cb.axis_size(tgt[0])
    positions = f"torch.arange({n_pos}, {f64})"
    if stride != "1":
        positions = f"{positions} * {stride}"
    out = [("o", 0, 0), ("o", 0, 1)]
    positions = ctx.bind("positions", positions, out[:1])
    angle = ctx.bind("angle", f"{positions}[:, None] * {name}", out)
    cdt = ctx.bind("complex_dtype", complex_dtype(cb))
    var = ctx.bind(identifier(op.label, "rotary") + "_table" if op.label else "rotary_table",
                   f"torch.polar(torch.ones_like({angle}), {angle}).to({cdt})", out)
    return [OpResult(var, out, full=False)]
