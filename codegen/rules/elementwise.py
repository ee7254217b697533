"""Elementwise operators: formulas, named functions, format changes, complex pairs."""
from __future__ import annotations

import numpy as np
import sympy

from ncdc.ir.datatypes import kind
from ncdc.ir.errors import SpecError
from ncdc.ir.numeric import FREE_INPUT
from ncdc.ir.operators import (
    Arithmetic,
    Cast,
    Decomplex,
    Elementwise,
    GenericOperator,
    Identity,
    PairsAsComplex,
    TypeConvert,
)
from ncdc.ir.rewrites import stable

from ..dtypes import DEFAULT
from ..emit import atom
from ..formula import FormulaPrinter
from ..names import formula_name, identifier
from ..operands import OpResult
from ..registry import rule


def _single(ctx):
    if len(ctx.ops) != 1 or len(ctx.b.output_weaves) != 1:
        raise SpecError(f"{ctx.op.kind} takes one input and gives one output", ctx.b.path)
    o = ctx.ops[0]
    return o, list(o.labels)


def _pointwise(ctx, code: str, name: str, labels, keeps_zero: bool = False
               ) -> list[OpResult]:
    """Bind a pointwise result; dead in, dead out (re-zeroed by selection unless the function
    maps 0 to 0, so dead positions still hold 0)."""
    o = ctx.ops[0]
    var = ctx.bind(name, code, labels)
    if o.live is None:
        return [OpResult(var, labels)]
    if keeps_zero:
        return [OpResult(var, labels, o.live, o.static)]
    var = ctx.bind(var, ctx.where_live(o.live, var), labels)
    return [OpResult(var, labels, o.live, o.static)]


def _as_float(ctx, o) -> str:
    """The operand as floats when a real/complex result is computed from naturals."""
    out_kind = kind(ctx.b.output_weaves[0].datatype)
    if kind(o.datatype) == "natural" and out_kind != "natural":
        return f"{o.expr}.to({ctx.real_dtype()})"
    return o.expr


@rule(Arithmetic)
def arithmetic(ctx):
    o, labels = _single(ctx)
    if o.imag is not None:
        return _arithmetic_on_parts(ctx, o, labels)
    x = _as_float(ctx, o)
    code = FormulaPrinter(x, ctx.symbol)(stable(ctx.op.formula))
    if code == x:
        return [OpResult(o.expr, labels, o.live, o.static)]
    if FREE_INPUT not in ctx.op.formula.free_symbols:
        code = f"torch.full_like({x}, {code})"
    if kind(ctx.b.output_weaves[0].datatype) == "natural":
        code = f"({code}).long()"
    try:
        at_zero = ctx.op.formula.subs(FREE_INPUT, 0)
        keeps_zero = bool(at_zero.is_zero)
    except Exception:  # noqa: BLE001 - undecidable: re-zero
        keeps_zero = False
    name = formula_name(ctx.op.formula, FREE_INPUT) or ctx.label_name or "value"
    if o.dead != "0":  # dead entries hold -inf, which the formula takes to 0
        return [OpResult(ctx.bind(name, code, labels), labels, o.live, o.static)]
    return _pointwise(ctx, code, name, labels, keeps_zero)


def reads_minus_infinity(op) -> bool:
    """Whether ``op`` may read dead entries holding -inf (``codegen.wires.Wire.dead``): a
    formula of one input that takes -inf to 0, such as ``e^x``; every other operator reads 0
    there."""
    if not isinstance(op, Arithmetic) or FREE_INPUT not in op.formula.free_symbols:
        return False
    try:
        return bool(stable(op.formula).subs(FREE_INPUT, -sympy.oo).is_zero)
    except Exception:  # noqa: BLE001 - undecidable: read 0
        return False


def _arithmetic_on_parts(ctx, o, labels) -> list[OpResult]:
    """The conjugate (or ``x``, ``-x``) of a complex value held as real parts
    (``codegen/complex_parts.py``): a part negated where the formula negates it."""
    f = ctx.op.formula
    if f not in (sympy.conjugate(FREE_INPUT), FREE_INPUT, -FREE_INPUT):
        raise SpecError(f"the formula {f} has no form on real parts", ctx.b.path)
    real, imag = o.expr, o.imag
    name = formula_name(f, FREE_INPUT) or ctx.label_name or "value"
    if f == -FREE_INPUT:
        real = ctx.bind(name + "_re", f"-{atom(real)}", labels)
    if f != FREE_INPUT:
        imag = ctx.bind(name + "_im", f"-{atom(imag)}", labels)
    return [OpResult(real, labels, o.live, o.static, imag=imag)]


ELEMENTWISE = {
    "identity": None,
    "relu": "torch.relu({x})",
    "sigmoid": "torch.sigmoid({x})",
    "tanh": "torch.tanh({x})",
    "exp": "torch.exp({x})",
    "silu": "F.silu({x})",
    "gelu": "0.5 * {x} * (1.0 + torch.erf({x} / math.sqrt(2.0)))",
}
"""Canonical function name (decided by the decoder) -> torch code; 'gelu' is the erf form."""


@rule(Elementwise)
def elementwise(ctx):
    o, labels = _single(ctx)
    fn = ctx.op.function
    if fn not in ELEMENTWISE:
        raise SpecError(f"Elementwise {ctx.op.label or '?'!r}: function {fn!r} is unknown, so "
                        "no code can be generated for it", ctx.b.path)
    template = ELEMENTWISE[fn]
    if template is None:
        return [OpResult(o.expr, labels, o.live, o.static)]
    return _pointwise(ctx, template.format(x=o.expr), fn, labels)


GENERIC = {
    r"\lceilx\rceil": "torch.ceil({x})",
    r"\lfloorx\rfloor": "torch.floor({x})",
    r"\lceil{x}\rceil": "torch.ceil({x})",
    r"\lfloor{x}\rfloor": "torch.floor({x})",
}
"""Whitespace-free LaTeX name of a GenericOperator -> torch code."""


@rule(GenericOperator)
def generic(ctx):
    o, labels = _single(ctx)
    name = "".join((ctx.op.name.latex if ctx.op.name is not None else "").split())
    template = GENERIC.get(name)
    if template is None:
        raise SpecError(f"GenericOperator {name!r} has no known meaning (known: "
                        f"{', '.join(sorted(GENERIC))})", ctx.b.path)
    base = "ceiling" if "ceil" in name else "floor"
    return _pointwise(ctx, template.format(x=o.expr), base, labels)


@rule(TypeConvert)
def type_convert(ctx):
    """Identity on values; the emulate-mode rounding to the target is emitted by the driver
    (it rounds every output held in a quantised format, QUANT_POLICY.md)."""
    o, labels = _single(ctx)
    return [OpResult(o.expr, labels, o.live, o.static, imag=o.imag)]


@rule(Cast, Identity)
def identity(ctx):
    o, labels = _single(ctx)
    return [OpResult(o.expr, labels, o.live, o.static, imag=o.imag)]


@rule(PairsAsComplex)
def pairs_as_complex(ctx):
    o, labels = _single(ctx)
    if not labels or labels[-1][0] != "t":
        raise SpecError("PairsAsComplex needs its paired axis as the target", ctx.b.path)
    out = labels[:-1] + [("o", 0, 0)]
    src = o.expr
    if kind(o.datatype) == "real":  # complex arithmetic in float32 at least (PRECISION.md)
        src = ctx.bind("widened", f"{o.expr}.to({ctx.wide_real()})", labels)
    imag = None
    if ctx.cb.real_parts:  # as (real, imaginary) parts (codegen/complex_parts.py)
        var = ctx.bind("pairs_re", f"{src}[..., 0::2]", out)
        imag = ctx.bind("pairs_im", f"{src}[..., 1::2]", out)
    else:
        var = ctx.bind("pairs", f"torch.complex({src}[..., 0::2], {src}[..., 1::2])", out)
    if o.live is None:
        return [OpResult(var, out, imag=imag)]
    live = ctx.bind(var + "_live", f"{o.live}[..., 0::2] & {o.live}[..., 1::2]")
    var = ctx.bind(var, ctx.where_live(live, var), out)
    if imag is not None:
        imag = ctx.bind(imag, ctx.where_live(live, imag), out)
    p, s = o.static
    st = (_pairs(p), _pairs(s))
    return [OpResult(var, out, live, st, imag=imag)]


def _pairs(a):
    if a.shape[-1] == 1:
        return a
    return a[..., 0::2] & a[..., 1::2]


@rule(Decomplex)
def decomplex(ctx):
    o, labels = _single(ctx)
    if not labels or labels[-1][0] != "t":
        raise SpecError("Decomplex needs its complex axis as the target", ctx.b.path)
    out = labels[:-1] + [("o", 0, 0)]
    if o.imag is not None:  # held as real parts (codegen/complex_parts.py)
        code = f"torch.stack(({o.expr}, {o.imag}), dim=-1).flatten(-2)"
    else:
        code = f"torch.stack(({o.expr}.real, {o.expr}.imag), dim=-1).flatten(-2)"
    if ctx.real_dtype() != DEFAULT:  # back to the forward's dtype
        code = f"{code}.to({ctx.real_dtype()})"
    var = ctx.bind("unpaired", code, out)
    if o.live is None:
        return [OpResult(var, out)]

    live = ctx.bind(var + "_live", f"{o.live}.repeat_interleave(2, dim=-1)")
    p, s = o.static
    st = tuple(a if a.shape[-1] == 1 else np.repeat(a, 2, axis=-1) for a in (p, s))
    return [OpResult(var, out, live, st)]


__all__ = ["identifier"]
