"""pyncd's TensorLogic operator: one tensor equation ``Y[lhs] = op(sum prod rhs)``.

Index identity is axis identity: an axis of ``lhs_indices`` is retained (a degree axis of the
``Broadcasted`` carrying the equation), an axis that occurs only on the right-hand side is
summed over. Right-hand factors are :class:`TensorRef` (an input array, one input weave each, in
order: retained axes TILED, summed axes as target slots) or Iverson predicates over axes
(:class:`IversonBinOp`, :class:`IversonUnaryOp`, leaves :class:`~ir.axes.Axis` and
:class:`IversonConst`): ``[pred]`` is 1 where it holds and 0 elsewhere, evaluated on the index
values of its axes (an axis occurring twice reads the same index). A predicate whose axes all
have literal integer sizes is computed; one over a symbolically sized axis is a ``Bool`` input
mask the caller supplies (pyncd's ``bc_signature``), read like a ``TensorRef`` with one slot
per axis leaf. See interpreter/READINGS.md.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..arrays import TILED
from ..axes import Axis
from ..datatypes import Natural, strip
from ..frozen import quick_init
from ..names import Name
from .base import Operator
from .elementwise import Identity
from .measure import ZERO, out_work, prod, work

COMPARISONS = ("<", "<=", ">", ">=", "==")
BINARY_OPS = COMPARISONS + ("+", "-", "*", "&", "|")
UNARY_OPS = ("abs", "-", "~")
"""The operators pyncd's Iverson evaluator knows (its ``materialise_iverson``)."""


@quick_init
@dataclass(frozen=True, eq=False)
class TensorRef:
    """A named array on the right-hand side, indexed by ``axes``."""

    name: Name | None
    axes: tuple[Axis, ...]


@quick_init
@dataclass(frozen=True, eq=False)
class IversonConst:
    """An integer literal in a predicate."""

    value: sympy.Expr


@quick_init
@dataclass(frozen=True, eq=False)
class IversonBinOp:
    """``lhs op rhs``: comparisons and ``&``/``|`` give 0/1, ``+ - *`` are arithmetic."""

    op: str
    lhs: object
    rhs: object


@quick_init
@dataclass(frozen=True, eq=False)
class IversonUnaryOp:
    """``abs(x)``, ``-x`` or ``~x = 1 - x``."""

    op: str
    operand: object


IVERSON_KINDS = (IversonBinOp, IversonUnaryOp)


def iverson_axes(expr) -> tuple[Axis, ...]:
    """The axis leaves of a predicate, left to right (repeats kept)."""
    if isinstance(expr, Axis):
        return (expr,)
    if isinstance(expr, IversonBinOp):
        return iverson_axes(expr.lhs) + iverson_axes(expr.rhs)
    if isinstance(expr, IversonUnaryOp):
        return iverson_axes(expr.operand)
    return ()


def constant_value(expr) -> int:
    """The value of a predicate with no axis leaves (pyncd's rules on integers)."""
    if isinstance(expr, IversonConst):
        return int(expr.value)
    if isinstance(expr, IversonUnaryOp):
        v = constant_value(expr.operand)
        return {"abs": abs(v), "-": -v, "~": 1 - v}[expr.op]
    if not isinstance(expr, IversonBinOp):
        raise TypeError(f"{type(expr).__name__} has axes or is not a predicate")
    a, b = constant_value(expr.lhs), constant_value(expr.rhs)
    ops = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "+": a + b,
           "-": a - b, "*": a * b, "&": a != 0 and b != 0, "|": a != 0 or b != 0}
    return int(ops[expr.op])


BOOL = Natural(sympy.Integer(2))
"""pyncd's ``Bool`` datatype, read as the naturals below 2 (false 0, true 1)."""


def is_bool(dt) -> bool:
    """Whether ``dt`` holds truth values: ``Natural`` below 2."""
    s = strip(dt)
    return isinstance(s, Natural) and s.max_value == 2


def is_computed(expr) -> bool:
    """Whether a predicate is computed from its index values: every axis it names has a
    literal integer size (pyncd's ``_iverson_is_materializable``). Otherwise the caller
    supplies it as a ``Bool`` mask."""
    return all(isinstance(a.size, sympy.Integer) for a in iverson_axes(expr))


def factor_axes(factor) -> tuple[Axis, ...]:
    """The axes a factor's input weave lists: a ``TensorRef``'s axes, a mask's axis leaves
    (repeats kept)."""
    return factor.axes if isinstance(factor, TensorRef) else iverson_axes(factor)


def distinct(axes) -> tuple[Axis, ...]:
    """``axes`` with repeats removed (first occurrence kept)."""
    return tuple(dict.fromkeys(axes))


@quick_init
@dataclass(frozen=True, eq=False)
class TensorEquation(Operator):
    """``Y[lhs_indices] = operator(sum over the other axes of prod rhs)``; ``operator`` None
    (or Identity) is the identity."""

    lhs_name: Name | None = None
    lhs_indices: tuple[Axis, ...] = ()
    rhs: tuple = ()
    operator: Operator | None = None

    @property
    def label(self) -> str:
        """The display name, else the left-hand array's name."""
        if self.name is not None:
            return self.name.text
        return self.lhs_name.text if self.lhs_name is not None else ""

    @property
    def refs(self) -> tuple[TensorRef, ...]:
        """The factors read from inputs, in input order."""
        return tuple(f for f in self.rhs if isinstance(f, TensorRef))

    @property
    def operands(self) -> tuple:
        """The factors read from inputs, in input order: every ``TensorRef`` and every Iverson
        factor over a symbolically sized axis (a ``Bool`` mask), as they stand in ``rhs``."""
        return tuple(f for f in self.rhs if isinstance(f, TensorRef) or not is_computed(f))

    @property
    def masks(self) -> tuple:
        """The Iverson factors read from inputs (``Bool`` masks)."""
        return tuple(f for f in self.operands if isinstance(f, IVERSON_KINDS))

    @property
    def predicates(self) -> tuple:
        """The Iverson factors computed from index values (every axis literally sized)."""
        return tuple(f for f in self.rhs if isinstance(f, IVERSON_KINDS) and is_computed(f))

    glyph = "Σ equation"
    family = "contraction"

    def check(self, site):
        """One operand per ``TensorRef`` and per ``Bool`` mask, one all-TILED result; each
        left-hand index is a degree axis; each input weave lists its factor's axes with the
        left-hand ones TILED (FORMAT-external: pyncd's ``bc_signature``); a mask is ``Bool``."""
        if not site.arity(n_in=len(self.operands), n_out=1):
            return
        site.rank("output", 0, 0, "only TILED slots")
        degree = tuple(site.b.degree)
        for i, a in enumerate(self.lhs_indices):
            if a not in degree:
                site.error("operator-rank", f"TensorEquation: left-hand index {a.label} is not "
                           "an axis of the box's degree", f".operator.lhs_indices[{i}]")
        kept = set(self.lhs_indices)
        for k, (f, w) in enumerate(zip(self.operands, site.b.input_weaves, strict=True)):
            axes = factor_axes(f)
            want = tuple(TILED if a in kept else a for a in axes)
            name = f.name.text if isinstance(f, TensorRef) and f.name is not None else (
                "?" if isinstance(f, TensorRef) else "mask")
            if len(want) != len(w.shape) or any(
                    (x is TILED) != (y is TILED) or (x is not TILED and x != y)
                    for x, y in zip(want, w.shape, strict=True)):
                slots = ", ".join("*" if a is TILED else a.label for a in want)
                site.error("operator-rank", f"TensorEquation: input {k} ({name}"
                           f"[{', '.join(a.label for a in axes)}]) needs the weave "
                           f"[{slots}] (left-hand axes TILED), not {w}", f".input_weaves[{k}]",
                           tuple(a.label for a in w.target))
            if not isinstance(f, TensorRef) and not is_bool(w.datatype):
                site.error("operator-type", f"TensorEquation: input {k} is the mask of an "
                           f"Iverson factor and must be Bool, the weave says {w.datatype}",
                           f".input_weaves[{k}]")

    def flops(self, b):
        """``n`` per term of the sum over every index its ``n`` factors (arrays and Iverson
        predicates) and result name (``n - 1`` products and one accumulation), plus one per
        result element for an elementwise operator after the sum."""
        axes = distinct(tuple(self.lhs_indices) + tuple(a for r in self.refs for a in r.axes))
        after = ZERO if self.operator is None or isinstance(self.operator, Identity) \
            else out_work(b)
        return prod(work(a) for a in axes) * len(self.rhs) + after


__all__ = ["TensorEquation"]
