"""Iverson predicates: the interpreter's arrays and the generated torch code against a plain
Python evaluation, index by index, on random predicate trees (pyncd's ``materialise_iverson``
semantics: comparisons and ``& |`` give 0/1, ``~x = 1 - x``, integer arithmetic)."""
from __future__ import annotations

import itertools

import numpy as np
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from ncdc.codegen.rules.tensorlogic import _Printer
from ncdc.interpreter.rules.tensorlogic import predicate_array
from ncdc.ir.axes import RawAxis
from ncdc.ir.names import Name
from ncdc.ir.operators.tensorlogic import (
    BINARY_OPS,
    UNARY_OPS,
    IversonBinOp,
    IversonConst,
    IversonUnaryOp,
    constant_value,
    distinct,
    iverson_axes,
)
from tests.lazy import torch

AXES = tuple(RawAxis(uid, Name(n), sympy.Integer(s)) for uid, n, s in
             ((1, "a", 3), (2, "b", 4), (3, "c", 2)))
SIZES = {a: int(a.size) for a in AXES}

leaves = st.one_of(st.sampled_from(AXES),
                   st.integers(-2, 3).map(lambda v: IversonConst(sympy.Integer(v))))
trees = st.recursive(
    leaves,
    lambda sub: st.one_of(
        st.builds(IversonBinOp, st.sampled_from(BINARY_OPS), sub, sub),
        st.builds(IversonUnaryOp, st.sampled_from(UNARY_OPS), sub)),
    max_leaves=6)


def value(expr, at: dict) -> int:
    """Plain Python, one index assignment at a time."""
    if isinstance(expr, RawAxis):
        return at[expr]
    if isinstance(expr, IversonConst):
        return int(expr.value)
    if isinstance(expr, IversonUnaryOp):
        v = value(expr.operand, at)
        return {"abs": abs(v), "-": -v, "~": 1 - v}[expr.op]
    left, right = value(expr.lhs, at), value(expr.rhs, at)
    if expr.op == "&":
        return int(left != 0 and right != 0)
    if expr.op == "|":
        return int(left != 0 or right != 0)
    return {"<": lambda: int(left < right), "<=": lambda: int(left <= right),
            ">": lambda: int(left > right), ">=": lambda: int(left >= right),
            "==": lambda: int(left == right), "+": lambda: left + right,
            "-": lambda: left - right, "*": lambda: left * right}[expr.op]()


def torch_values(expr, axes) -> np.ndarray:
    index, scope = {}, {"torch": torch}
    for i, a in enumerate(axes):
        scope[f"i{i}"] = torch.arange(SIZES[a])
        sl = ", ".join(":" if j == i else "None" for j in range(len(axes)))
        index[a] = f"i{i}[{sl}]" if len(axes) > 1 else f"i{i}"
    code, _ = _Printer(index)(expr)
    out = eval(f"({code}).to(torch.float64)", scope)
    return np.broadcast_to(out.numpy(), tuple(SIZES[a] for a in axes))


@settings(max_examples=150, deadline=None)
@given(trees.filter(lambda e: not isinstance(e, RawAxis) and iverson_axes(e)))
def test_predicates_agree_with_plain_python(expr):
    axes = distinct(iverson_axes(expr))
    got, order = predicate_array(expr, SIZES)
    assert order == axes
    gen = torch_values(expr, axes)
    for idx in itertools.product(*(range(SIZES[a]) for a in axes)):
        want = value(expr, dict(zip(axes, idx, strict=True)))
        assert got[idx] == want, (expr, idx)
        assert gen[idx] == want, (expr, idx)


constant_trees = st.recursive(
    st.integers(-2, 3).map(lambda v: IversonConst(sympy.Integer(v))),
    lambda sub: st.one_of(
        st.builds(IversonBinOp, st.sampled_from(BINARY_OPS), sub, sub),
        st.builds(IversonUnaryOp, st.sampled_from(UNARY_OPS), sub)),
    max_leaves=5)


@settings(max_examples=100, deadline=None)
@given(constant_trees)
def test_constant_predicates_fold(expr):
    want = value(expr, {})
    assert constant_value(expr) == want
    got, axes = predicate_array(expr, {})
    assert axes == () and got[()] == want
