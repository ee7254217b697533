"""The vocabulary of FLOP rules (:meth:`Operator.flops <ir.operators.base.Operator.flops>`).

Work on a ``SparseAxis`` counts its ``k`` live positions; every other axis counts its storage
length (window slots ``w|x`` included: the steady state of a long sequence). Complex products
count 6, complex additions 2.
"""
from __future__ import annotations

import sympy

from ..axes import Axis, SparseAxis
from ..datatypes import kind
from ..numeric import FREE_INPUT

ZERO, ONE = sympy.Integer(0), sympy.Integer(1)


def work(axis: Axis) -> sympy.Expr:
    """Positions of ``axis`` that computation visits: a top-k sparse axis its ``k`` live ones."""
    return axis.activity if isinstance(axis, SparseAxis) else axis.size


def prod(xs) -> sympy.Expr:
    xs = list(xs)
    return sympy.Mul(*xs) if xs else ONE


def target_work(w) -> sympy.Expr:
    """Positions of a weave's target arrays that computation visits."""
    return prod(work(a) for a in w.target)


def out_work(b) -> sympy.Expr:
    """Target positions of output 0 (1 without outputs)."""
    return target_work(b.output_weaves[0]) if b.output_weaves else ONE


def in_work(b) -> sympy.Expr:
    """Target positions of input 0 (1 without inputs)."""
    return target_work(b.input_weaves[0]) if b.input_weaves else ONE


def has_complex(b) -> bool:
    """Some operand is complex."""
    return any(kind(w.datatype) == "complex" for w in b.input_weaves)


def formula_ops(expr) -> int:
    """Operations of an elementwise formula that involve the operand: an n-ary sum or product
    counts n - 1, every power or function 1; constant sub-expressions are folded (0)."""
    expr = sympy.sympify(expr)
    count = 0
    stack = [expr]
    while stack:
        e = stack.pop()
        if not e.has(FREE_INPUT) or e.is_Atom:
            continue
        count += len(e.args) - 1 if isinstance(e, (sympy.Add, sympy.Mul)) else 1
        stack.extend(a for a in e.args if a.has(FREE_INPUT))
    return count


__all__ = ["ONE", "ZERO", "formula_ops", "has_complex", "in_work", "out_work", "prod",
           "target_work", "work"]
