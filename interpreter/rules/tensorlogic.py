"""``TensorEquation`` (pyncd TensorLogic): ``Y[lhs] = op(sum over summed axes of prod rhs)``.

One ``numpy.einsum`` in sublist form: every axis is one label (identity = axis identity), the
degree axes lead after an Ellipsis for the enclosing batch; an input contributes its degree dims
and its target axes (a ``Bool`` mask its truth values, nonzero = 1; a repeated axis reads its
diagonal), a computed Iverson predicate the 0/1 array it takes on the index values of its
distinct axes. Liveness as in ``Einops``: live iff some term has every input factor live.
The nested ``operator`` (None or Identity: none) is applied afterwards, pointwise; a ``Bool``
result is the truth of ``sum > 0`` (pyncd's demotion).
"""
from __future__ import annotations

import numpy as np

from ncdc.ir.axes import Axis
from ncdc.ir.operators import Elementwise, Identity
from ncdc.ir.operators.tensorlogic import (
    IversonBinOp,
    IversonConst,
    IversonUnaryOp,
    TensorEquation,
    TensorRef,
    distinct,
    is_bool,
    iverson_axes,
)

from ..registry import rule
from ..values import as_kind, finished
from .arithmetic import ELEMENTWISE_FUNCTIONS

_BINARY = {
    "<": lambda a, b: (a < b).astype(np.float64),
    "<=": lambda a, b: (a <= b).astype(np.float64),
    ">": lambda a, b: (a > b).astype(np.float64),
    ">=": lambda a, b: (a >= b).astype(np.float64),
    "==": lambda a, b: (a == b).astype(np.float64),
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "&": lambda a, b: ((a != 0) & (b != 0)).astype(np.float64),
    "|": lambda a, b: ((a != 0) | (b != 0)).astype(np.float64),
}
_UNARY = {"abs": np.abs, "-": np.negative, "~": lambda a: 1.0 - a}


def iverson_values(expr, grids: dict) -> np.ndarray:
    """The predicate's values; ``grids[axis]`` holds the axis's index values, shaped to
    broadcast (comparisons and ``& |`` give 0/1, ``~x`` is ``1 - x``)."""
    if isinstance(expr, Axis):
        return grids[expr]
    if isinstance(expr, IversonConst):
        return np.float64(int(expr.value))
    if isinstance(expr, IversonBinOp):
        return _BINARY[expr.op](iverson_values(expr.lhs, grids), iverson_values(expr.rhs, grids))
    if isinstance(expr, IversonUnaryOp):
        return _UNARY[expr.op](iverson_values(expr.operand, grids))
    raise TypeError(type(expr).__name__)


def predicate_array(expr, sizes: dict) -> tuple[np.ndarray, tuple[Axis, ...]]:
    """The predicate as an array over its distinct axes (in order of first occurrence)."""
    axes = distinct(iverson_axes(expr))
    n = len(axes)
    grids = {a: np.arange(sizes[a], dtype=np.float64).reshape(
        (1,) * i + (sizes[a],) + (1,) * (n - i - 1)) for i, a in enumerate(axes)}
    vals = np.broadcast_to(iverson_values(expr, grids), tuple(sizes[a] for a in axes))
    return np.array(vals, dtype=np.float64), axes


@rule(TensorEquation)
def tensor_equation(b, inputs, ctx):
    eq = b.operator
    factors, preds = eq.operands, eq.predicates
    if len(inputs) != len(factors):
        raise ctx.error(f"the equation reads {len(factors)} arrays (its TensorRefs and Bool "
                        f"masks) but the box has {len(inputs)} inputs")
    degree = tuple(b.degree)
    missing = [a.label for a in eq.lhs_indices if a not in degree]
    if missing:
        raise ctx.error(f"left-hand index {missing[0]} is not a degree axis of the box")
    labels: dict[Axis, int] = {}

    def lab(axis):
        return labels.setdefault(axis, len(labels))

    deg = [lab(a) for a in degree]
    operands, masks = [], []
    for k, v in enumerate(inputs):
        sub = [Ellipsis] + deg + [lab(a) for a in b.input_weaves[k].target]
        if np.ndim(v.values) != len(ctx.batch) + len(sub) - 1:
            raise ctx.error(f"input {k} has {np.ndim(v.values)} dims, expected "
                            f"{len(ctx.batch) + len(sub) - 1}")
        vals = v.values if isinstance(factors[k], TensorRef) else \
            (np.asarray(v.values) != 0).astype(np.float64)
        operands += [vals, sub]
        if v.live is not None:
            masks += [v.live, sub]
    spanned = set(deg) if inputs else set()
    for f in preds:
        vals, axes = predicate_array(f, {a: ctx.size(a.size) for a in iverson_axes(f)})
        sub = [lab(a) for a in axes]
        operands += [vals, sub]
        spanned |= set(sub)
    if len(labels) > 52:
        raise ctx.error("more than 52 distinct axes in one equation")
    out_sub = [d for d in deg if d in spanned]
    out = np.einsum(*operands, [Ellipsis] + out_sub)
    if len(out_sub) < len(deg):  # a degree axis no factor spans: broadcast (size 1)
        nb = out.ndim - len(out_sub)
        out = out.reshape(out.shape[:nb] + tuple(out.shape[nb + out_sub.index(d)]
                                                 if d in out_sub else 1 for d in deg))
    live = np.einsum(*masks, [Ellipsis] + deg) if masks else None
    out = _nonlinearity(eq, out, ctx)
    if is_bool(b.output_weaves[0].datatype):  # pyncd's demotion of a Bool result: a truth
        out = (np.asarray(out) > 0).astype(np.float64)  # value, the sum is positive
    return [finished(as_kind(np.asarray(out), b.output_weaves[0].datatype), live)]


def _nonlinearity(eq: TensorEquation, x, ctx):
    op = eq.operator
    if op is None or isinstance(op, Identity):
        return x
    if isinstance(op, Elementwise):
        fn = ELEMENTWISE_FUNCTIONS.get(op.function)
        if fn is not None:
            with np.errstate(all="ignore"):
                return fn(x)
    raise ctx.error(f"a {op.kind} nonlinearity inside a TensorEquation is not supported "
                    "(pyncd splits it into its own box)")
