"""Nullary sources that are not learned: fixed arrays and rotary tables."""
from __future__ import annotations

from ncdc.ir.axes import is_token_axis
from ncdc.ir.datatypes import kind
from ncdc.ir.errors import SpecError
from ncdc.ir.names import plain_title
from ncdc.ir.operators import FixedArray, Rotary, YarnRotary

from ..fixed_data import natural_bound, prime_total, user_data
from ..formula import FormulaPrinter
from ..names import identifier
from ..operands import OpResult
from ..registry import rule


@rule(FixedArray)
def fixed_array(ctx):
    """A buffer: the Engram primes computed by their rule, else data only the user can supply
    (``codegen/fixed_data.py``)."""
    b, op = ctx.b, ctx.op
    out = [("o", 0, p) for p in range(len(b.output_weaves[0].target))]
    shape = [ctx.init_size(ctx.axis(lab).size) for lab in out]
    dt = b.output_weaves[0].datatype
    base = identifier(op.label, "fixed") if op.label else "fixed"
    total = prime_total(ctx, op) if kind(dt) == "natural" and len(out) == 1 else None
    if total is not None:
        ctx.use("fixed")
        args = f"{ctx.symbol(total)}, {natural_bound(ctx, dt)}"

        def init(p):
            return f"{p}.copy_(consecutive_primes({p}.shape[0], {args}))"

        buf = ctx.param(base, "fixed", shape, init, learned=False, dtype="torch.long")
    elif kind(dt) == "natural":
        buf = user_data(ctx, base, "fixed", shape, dt, plain_title(op.label or base))
    else:
        raise SpecError("a real-valued fixed array has no values in the spec and no rule; the "
                        "code generator supports natural ones", b.path)
    return [OpResult(buf, out, full=False)]


@rule(Rotary, YarnRotary)
def rotary(ctx):
    """``F[x, t] = exp(i * stride * x * theta[t])``, ``theta[t] = base^(-t/|t|)`` (YaRN:
    ``theta[t] (1 - r[t] + r[t]/factor)``, ``r`` the clamped ramp); positions from 0 (from the
    tokens already decoded, in ``step``). Computed in the root's forward or, in a block it
    calls, by the caller, once per forward for every block it calls that reads the same table
    (:meth:`codegen.lower.ClassBuilder.table_argument`)."""
    b, op = ctx.b, ctx.op
    if ctx.ops:
        raise SpecError("a rotary table takes no input", b.path)
    tgt = b.output_weaves[0].target
    if len(tgt) != 2:
        raise SpecError("a rotary table has the target [positions, pairs]", b.path)
    out = [("o", 0, 0), ("o", 0, 1)]
    base = identifier(op.label, "rotary") if op.label else "rotary"
    passed = ctx.cb.table_argument((b,), base)
    if passed is not None:  # the caller computes it once for all its blocks that read it
        return [OpResult(passed[0], out, full=False, imag=passed[1] if len(passed) > 1 else None)]
    fwd = FormulaPrinter("t", ctx.symbol)
    pairs = ctx.size_code(tgt[1].size)
    dev = ctx.device()
    f64 = "dtype=torch.float64" + (f", device={dev}" if dev else "")
    # the table is computed in forward, in float64 (PRECISION.md): it follows the input's device
    # and dtype, and ``.double()`` gives float64-exact angles
    exponent = ctx.bind("exponent", f"torch.arange({pairs}, {f64}) / {pairs}", [("o", 0, 1)])
    theta = f"{fwd(op.base)} ** -{exponent}"
    if isinstance(op, YarnRotary):
        lo, hi, factor = fwd(op.ramp_start), fwd(op.ramp_end), fwd(op.factor)
        ramp = ctx.bind("ramp", f"((torch.arange({pairs}, {f64}) - {lo}) / ({hi} - {lo}))"
                        f".clamp(0, 1)", [("o", 0, 1)])
        theta = f"{theta} * (1 - {ramp} + {ramp} / {factor})"
    name = ctx.bind("theta", theta, [("o", 0, 1)])
    stride = FormulaPrinter("x", ctx.symbol)(op.position_stride)
    n_pos = ctx.axis_size(tgt[0])
    positions = f"torch.arange({n_pos}, {f64})"
    if is_token_axis(tgt[0]) and "decoding" in ctx.gen.runtime:  # offset while decoding
        ctx.use("decoding")
        positions = f"token_positions({n_pos}{f', {dev}' if dev else ''})"
    if stride != "1":
        positions = f"{positions} * {stride}"
    angle = ctx.bind("angle", f"torch.outer({positions}, {name})", out)
    if ctx.cb.real_parts:  # as (real, imaginary) parts (codegen/complex_parts.py)
        dt = ctx.bind("table_dtype", ctx.wide_real())
        # cos and sin stacked into one tensor: inductor stores a concatenation, so a compiled
        # forward computes the table once, not again for every element that reads it (a
        # query's heads); eager values are those of the two tables alone
        cos, sin = ctx.fw.names.fresh(base + "_cos"), ctx.fw.names.fresh(base + "_sin")
        ctx.fw.assign((cos, sin), f"torch.stack(({angle}.cos(), {angle}.sin())).to({dt})",
                      ctx.shape_comment(out))
        return [OpResult(cos, out, full=False, imag=sin)]
    cdt = ctx.bind("complex_dtype", ctx.complex_dtype())
    var = ctx.bind(base + "_table", f"torch.polar(torch.ones_like({angle}), {angle}).to({cdt})",
                   out)
    return [OpResult(var, out, full=False)]
