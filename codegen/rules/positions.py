"""Nullary sources filled by a rule: a constant (``ConstantOp``) and the positions along an
axis (``Arrange``). Each is built in ``forward`` on the forward's device, over the output's
target axes only (the degree broadcasts)."""
from __future__ import annotations

from ncdc.ir.datatypes import kind
from ncdc.ir.operators import Arrange, ConstantOp

from ..formula import FormulaPrinter
from ..operands import OpResult
from ..registry import rule


def _device(ctx) -> str:
    dev = ctx.device()
    return f", device={dev}" if dev else ""


@rule(ConstantOp)
def constant_op(ctx):
    """``torch.full(target shape, value)`` in the output's dtype (long for a natural)."""
    b, op = ctx.b, ctx.op
    w = b.output_weaves[0]
    out = [("o", 0, p) for p in range(len(w.target))]
    dtype = {"natural": "torch.long", "complex": ctx.complex_dtype()}.get(kind(w.datatype),
                                                                         ctx.real_dtype())
    value = FormulaPrinter("x", ctx.symbol)(op.value)
    shape = "".join(f"{ctx.size(lab)}, " for lab in out)
    var = ctx.bind("constant", f"torch.full(({shape}), {value}, dtype={dtype}{_device(ctx)})",
                   out)
    return [OpResult(var, out, full=False)]


@rule(Arrange)
def arrange(ctx):
    """``torch.arange(|x|)``: the positions of the one target axis."""
    out = [("o", 0, 0)]
    var = ctx.bind("positions", f"torch.arange({ctx.size(out[0])}{_device(ctx)})", out)
    return [OpResult(var, out, full=False)]
