"""Elementwise functions: ``Arithmetic`` formulas (docs/format.md §11.7, lowered once through sympy,
:mod:`interpreter.formulas`), ``GenericOperator`` (meaning by name, §11.22) and the older
``Elementwise`` (the function its decoder named). Dead in, dead out."""
from __future__ import annotations

import math

import numpy as np

from ncdc.ir.datatypes import kind
from ncdc.ir.operators import Arithmetic, Elementwise, GenericOperator

from ..formulas import _sigmoid
from ..registry import rule
from ..values import as_kind, finished


def _operand(b, v):
    x = v.values
    if kind(b.output_weaves[0].datatype) != "natural" and np.issubdtype(x.dtype, np.integer):
        x = x.astype(np.float64)
    return x


def _result(b, y, v):
    y = np.asarray(y)
    out_kind = kind(b.output_weaves[0].datatype)
    if out_kind == "real" and np.iscomplexobj(y):
        raise ValueError("a real output weave received complex values")
    if out_kind == "natural" or np.issubdtype(y.dtype, np.integer) or y.dtype == np.bool_:
        y = as_kind(y, b.output_weaves[0].datatype)
    return finished(y, v.live)


@rule(Arithmetic)
def arithmetic(b, inputs, ctx):
    (v,) = inputs
    f = ctx.formula(b.operator)
    return [_result(b, f(_operand(b, v)), v)]


def _norm_name(op) -> str:
    return "".join((op.name.latex if op.name is not None else "").split())


GENERIC_FUNCTIONS = {
    r"\lceilx\rceil": np.ceil,
    r"\lfloorx\rfloor": np.floor,
    r"\lceil{x}\rceil": np.ceil,
    r"\lfloor{x}\rfloor": np.floor,
}
"""Whitespace-free LaTeX name of a GenericOperator -> elementwise numpy function."""


@rule(GenericOperator)
def generic(b, inputs, ctx):
    (v,) = inputs
    name = _norm_name(b.operator)
    fn = GENERIC_FUNCTIONS.get(name)
    if fn is None:
        raise ctx.error(f"GenericOperator {name!r} has no known meaning (known: "
                        f"{', '.join(sorted(GENERIC_FUNCTIONS))})")
    with np.errstate(all="ignore"):
        return [_result(b, fn(_operand(b, v)), v)]


_erf = np.vectorize(math.erf, otypes=[np.float64])


ELEMENTWISE_FUNCTIONS = {
    "identity": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "exp": np.exp,
    "silu": lambda x: x * _sigmoid(x),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
}
"""Canonical function name (decided by the decoder) -> numpy function. 'gelu' is the exact
(erf) form."""


@rule(Elementwise)
def elementwise(b, inputs, ctx):
    (v,) = inputs
    fn = ELEMENTWISE_FUNCTIONS.get(b.operator.function)
    if fn is None:
        label = b.operator.label or "?"
        raise ctx.error(f"Elementwise {label!r}: function {b.operator.function!r} is unknown, "
                        "so it cannot be evaluated (no silent default)")
    with np.errstate(all="ignore"):
        return [_result(b, fn(_operand(b, v)), v)]
