"""FLOPs of one operator at one degree index. Each operator class states its rule
(:meth:`Operator.flops <ir.operators.base.Operator.flops>`, beside its fields in
``ir/operators/``); the vocabulary the rules share is :mod:`ir.operators.measure`.

Work on a ``SparseAxis`` counts its ``k`` live positions; every other axis counts its storage
length (window slots ``w|x`` included: the steady state of a long sequence). A box
(``BlockOperator``) costs what its body costs, counted by :mod:`ir.cost`.
"""
from __future__ import annotations

from dataclasses import replace

import sympy

from .morphisms import Broadcasted
from .operators import Einops, Linear
from .operators.contraction import bank_axes
from .operators.measure import formula_ops, prod, target_work, work


def flops(b: Broadcasted) -> sympy.Expr:
    """FLOPs of one degree index of ``b``, by its operator's rule."""
    return b.operator.flops(b)


def is_contraction(b: Broadcasted) -> bool:
    """A ``Linear`` with an input, or an ``Einops`` summing a group over two or more operands:
    the work a matrix multiply does."""
    op = b.operator
    if isinstance(op, Linear):
        return bool(b.input_weaves)
    if isinstance(op, Einops):
        return len(b.input_weaves) >= 2 and any(op.signature)
    return False


def iterated(c, n):
    """The cost ``c`` of a scan's step run ``n`` times with one set of weights: the work
    (FLOPs, lookups) ``n`` times, the weights and the arrays of one step once."""
    return replace(c, lookups=n * c.lookups, flops=n * c.flops, matmul_flops=n * c.matmul_flops)


__all__ = ["bank_axes", "flops", "formula_ops", "is_contraction", "iterated", "prod",
           "target_work", "work"]
