"""FLOPs of one operator at one degree index: one rule per operator class (``FLOP_RULES``),
like the interpreter's evaluation rules and the code generator's emission rules.

Work on a ``SparseAxis`` counts its ``k`` live positions; every other axis counts its storage
length (window slots ``w|x`` included: the steady state of a long sequence).

* ``Linear``: ``2 * in * out`` (``+ out`` for a bias); an expert/group bank (an output axis that
  repeats a degree axis, kept by the ``View<diag>`` that follows) counts one slab per degree
  index; without an input it is a held array (0).
* ``Einops`` over ``n`` operands: with summed groups ``n`` per term (``n - 1`` products and one
  accumulation: ``2 * MACs`` for two operands), without groups ``n - 1`` per element. Complex
  products count 6, complex additions 2.
* ``TensorEquation`` with ``n`` factors (arrays and Iverson predicates): ``n`` per term of the
  sum over every index its factors and result name (``n - 1`` products and one accumulation),
  plus one per result element for an elementwise operator after the sum.
* ``Arithmetic``: per element, one per operation of its formula that involves the operand (an
  ``n``-ary sum or product ``n - 1``, every power and function 1; constant parts are folded).
* ``TypeConvert``: 1 per element; 4 to a block-scaled format (magnitude, group maximum,
  division by the scale, rounding).
* ``Normalize``: 3 per element (square, accumulate, scale), +1 each for gain and bias, +3 per
  normalised group (mean, epsilon, reciprocal root). ``L1Norm``: 2 per element (+1 per group
  for a non-zero epsilon). ``SoftMax``: 5 per element.
* ``AdditionOp``: ``n - 1`` per element. ``Maximum``, ``BitwiseXor``, ``TopK``: 1 per input
  element. ``Modulo``, ``Select``, ``GenericOperator``, older ``Elementwise``: 1 per element.
  ``WeightedTriangularLower``: 2 per element.
* Moves and sources cost 0: views, concatenations, ``Cast``, ``Identity``, complex pairing,
  ``Embedding`` and ``IndexSelect`` lookups, ``FixedArray``, rotary tables. A box
  (``BlockOperator``) costs what its body costs, counted by :mod:`ir.cost`.
"""
from __future__ import annotations

from collections.abc import Callable

import sympy

from .axes import Axis, SparseAxis
from .datatypes import Quantified, kind
from .morphisms import Broadcasted
from .numeric import FREE_INPUT
from .operators import (
    AdditionOp,
    Arithmetic,
    BitwiseXor,
    BlockOperator,
    Cast,
    ConcatenateAxes,
    CovariantView,
    Decomplex,
    DeconcatenateAxes,
    Einops,
    Elementwise,
    Embedding,
    FixedArray,
    GenericOperator,
    Identity,
    IndexSelect,
    L1Norm,
    Linear,
    Maximum,
    Modulo,
    Normalize,
    PairsAsComplex,
    ParaBlockOperator,
    Rotary,
    Select,
    SoftMax,
    TopK,
    TypeConvert,
    View,
    WeightedTriangularLower,
    YarnRotary,
)
from .operators.tensorlogic import TensorEquation, distinct

ZERO, ONE = sympy.Integer(0), sympy.Integer(1)

FLOP_RULES: dict[type, Callable[[Broadcasted], sympy.Expr]] = {}
"""Operator class -> FLOPs of one degree index of a ``Broadcasted`` applying it."""


def flop_rule(*classes):
    def register(fn):
        for c in classes:
            FLOP_RULES[c] = fn
        return fn
    return register


def work(axis: Axis) -> sympy.Expr:
    """Positions of ``axis`` that computation visits: a top-k sparse axis its ``k`` live ones."""
    return axis.activity if isinstance(axis, SparseAxis) else axis.size


def prod(xs) -> sympy.Expr:
    xs = list(xs)
    return sympy.Mul(*xs) if xs else ONE


def target_work(w) -> sympy.Expr:
    return prod(work(a) for a in w.target)


def bank_axes(b: Broadcasted) -> tuple[Axis, ...]:
    """Output axes of a ``Linear`` that repeat a degree axis (an expert or group bank)."""
    if not isinstance(b.operator, Linear) or not b.input_weaves or not b.output_weaves:
        return ()
    deg = b.degree
    return tuple(a for a in b.output_weaves[0].target if a in deg)


def is_contraction(b: Broadcasted) -> bool:
    """A ``Linear`` with an input, or an ``Einops`` summing a group over two or more operands:
    the work a matrix multiply does."""
    op = b.operator
    if isinstance(op, Linear):
        return bool(b.input_weaves)
    if isinstance(op, Einops):
        return len(b.input_weaves) >= 2 and any(op.signature)
    return False


def flops(b: Broadcasted) -> sympy.Expr:
    """FLOPs of one degree index of ``b``; an operator without a rule is a ``KeyError``."""
    return FLOP_RULES[type(b.operator)](b)


def _out(b) -> sympy.Expr:
    return target_work(b.output_weaves[0]) if b.output_weaves else ONE


def _in(b) -> sympy.Expr:
    return target_work(b.input_weaves[0]) if b.input_weaves else ONE


def _complex(b) -> bool:
    return any(kind(w.datatype) == "complex" for w in b.input_weaves)


@flop_rule(Linear)
def _linear(b):
    if not b.input_weaves:
        return ZERO
    bank = set(bank_axes(b))
    inner = prod(target_work(w) for w in b.input_weaves)
    outer = prod(work(a) for a in b.output_weaves[0].target if a not in bank)
    return 2 * inner * outer + (outer if b.operator.bias else ZERO)


@flop_rule(Einops)
def _einops(b):
    mul, add = (6, 2) if _complex(b) else (1, 1)
    groups: dict[int, Axis] = {}
    for w, sig in zip(b.input_weaves, b.operator.signature):
        for g, a in zip(sig, w.target):
            groups.setdefault(g, a)
    n = len(b.input_weaves)
    if groups:
        return prod(work(a) for a in groups.values()) * ((n - 1) * mul + add)
    return sympy.Integer(max(n - 1, 0) * mul)


@flop_rule(TensorEquation)
def _tensor_equation(b):
    op = b.operator
    axes = distinct(tuple(op.lhs_indices) + tuple(a for r in op.refs for a in r.axes))
    after = ZERO if op.operator is None or isinstance(op.operator, Identity) else _out(b)
    return prod(work(a) for a in axes) * len(op.rhs) + after


@flop_rule(Arithmetic)
def _arithmetic(b):
    return formula_ops(b.operator.formula) * _out(b)


@flop_rule(TypeConvert)
def _convert(b):
    op = b.operator
    tgt = op.target if op.target is not None else (
        b.output_weaves[0].datatype if b.output_weaves else None)
    scaled = isinstance(tgt, Quantified) and tgt.scale is not None
    return (4 if scaled else 1) * _out(b)


@flop_rule(Normalize)
def _normalize(b):
    op = b.operator
    return (3 + int(op.gain) + int(op.bias)) * _in(b) + 3


@flop_rule(L1Norm)
def _l1norm(b):
    return 2 * _in(b) + (0 if b.operator.epsilon == 0 else 1)


@flop_rule(SoftMax)
def _softmax(b):
    return 5 * _in(b)


@flop_rule(AdditionOp)
def _addition(b):
    add = 2 if _complex(b) else 1
    return max(len(b.input_weaves) - 1, 0) * add * _out(b)


@flop_rule(Maximum, BitwiseXor, TopK)
def _fold(b):
    return _in(b)


@flop_rule(Modulo, Select, GenericOperator, Elementwise)
def _pointwise(b):
    return _out(b)


@flop_rule(WeightedTriangularLower)
def _triangular(b):
    return 2 * _in(b)


@flop_rule(View, CovariantView, ConcatenateAxes, DeconcatenateAxes, Cast, Identity,
           PairsAsComplex, Decomplex, Embedding, IndexSelect, FixedArray, Rotary, YarnRotary,
           BlockOperator, ParaBlockOperator)
def _free(b):
    return ZERO


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
        if isinstance(e, (sympy.Add, sympy.Mul)):
            count += len(e.args) - 1
            stack.extend(a for a in e.args if a.has(FREE_INPUT))
        else:
            count += 1
            stack.extend(a for a in e.args if a.has(FREE_INPUT))
    return count


__all__ = ["FLOP_RULES", "bank_axes", "flop_rule", "flops", "formula_ops", "is_contraction",
           "prod", "target_work", "work"]
