"""Shape formatting and the comparison of two object tuples at a join.

Both the validator (``spec.validate``) and the wiring graph (``ir.graph``) decide whether two
ends of a wire agree with :func:`compare_objects`, so the two always report the same joins.

Formatting: an array prints as ``Q(BF16)[x, n, m]`` (axis labels) or, given an
:class:`~ir.env.Env`, as ``Q(BF16)[12, 4, 5120]``. A size the environment cannot fully evaluate
(an unbound symbol) prints symbolically (``2*b``), never raises.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy

from .arrays import Array
from .axes import Axis
from .datatypes import compatible
from .env import Env
from .errors import BindingError
from .frozen import quick_init


def size_text(expr, env: Env | None = None) -> str:
    """An axis size (or any integral expression) as text: the integer when ``env`` binds every
    symbol in it, else the (partially substituted) symbolic expression."""
    try:
        val = env.subs(expr) if env is not None else sympy.sympify(expr)
    except (TypeError, ValueError, sympy.SympifyError, BindingError):
        return _sstr(expr)
    if isinstance(val, sympy.Integer):
        return str(int(val))
    if env is not None and val.is_number:
        try:
            simple = sympy.nsimplify(val)
            if simple.is_Integer:
                return str(int(simple))
        except (TypeError, ValueError):
            pass
    return _sstr(val)


def _sstr(val) -> str:
    """``sympy.sstr`` that never meets Python's int-to-text digit limit nor deep recursion."""
    try:
        return sympy.sstr(val)
    except (ValueError, RecursionError):
        return "(an expression too large to print)"


def axis_text(axis: Axis, env: Env | None = None) -> str:
    """``m`` symbolically, ``5120`` with an environment."""
    if env is None:
        return axis.label
    return size_text(axis.size, env)


def array_text(arr, env: Env | None = None) -> str:
    """An array (or a single axis, in the stride category) as display text."""
    if isinstance(arr, Axis):
        return axis_text(arr, env) if env is not None else arr.label
    if isinstance(arr, Array):
        return f"{arr.datatype}[{', '.join(axis_text(a, env) for a in arr.shape)}]"
    return str(arr)


def objects_text(objs, env: Env | None = None) -> str:
    """A dom or cod tuple: ``(Q(FP32)[x, n], R[x, n, m])``; ``()`` when empty."""
    return "(" + ", ".join(array_text(o, env) for o in objs) + ")"


def axis_labels(objs) -> tuple[str, ...]:
    """Labels of every axis in a tuple of arrays/axes, first occurrence order, no repeats."""
    seen: list[str] = []
    for o in objs:
        for a in (o.shape if isinstance(o, Array) else (o,) if isinstance(o, Axis) else ()):
            if a.label not in seen:
                seen.append(a.label)
    return tuple(seen)


@quick_init
@dataclass(frozen=True)
class JoinProblem:
    """One disagreement between the two ends of a join.

    ``kind``: ``arity`` (different number of wires; ``position`` is -1), ``category`` (an axis
    meets an array), ``axes`` (different axes, compared by uid, in order), ``datatype``
    (incompatible datatypes) or ``leniency`` (datatypes differ only in their quantisation, which
    docs/format.md §2.5 accepts: a warning, not an error)."""

    kind: str
    position: int
    left: Any  # an axis or array; for kind "arity" the whole sequence
    right: Any

    @property
    def is_error(self) -> bool:
        return self.kind != "leniency"

    def describe(self, left_name: str = "left", right_name: str = "right") -> str:
        if self.kind == "arity":
            return (f"{left_name} gives {len(self.left)} wire(s) {objects_text(self.left)} but "
                    f"{right_name} takes {len(self.right)} {objects_text(self.right)}")
        lt, rt = array_text(self.left), array_text(self.right)
        head = f"wire {self.position}: {left_name} gives {lt} but {right_name} takes {rt}"
        if self.kind == "category":
            return f"{head} (an axis meets an array)"
        if self.kind == "axes":
            return f"{head} (the axes differ)"
        if self.kind == "datatype":
            return f"{head} (incompatible datatypes)"
        return f"{head} (they differ only in quantisation; accepted, docs/format.md §2.5)"

    def axes_involved(self) -> tuple[str, ...]:
        if self.kind == "arity":
            return axis_labels(tuple(self.left) + tuple(self.right))
        return axis_labels((self.left, self.right))


def compare_objects(left, right) -> list[JoinProblem]:
    """Compare what one side gives (``left``) with what the other takes (``right``), position
    by position: axes by uid, array shapes by uid in order, datatypes exactly and then with
    :func:`ir.datatypes.compatible`. Empty list = they agree exactly."""
    left, right = tuple(left), tuple(right)
    if len(left) != len(right):
        return [JoinProblem("arity", -1, left, right)]
    out = []
    for i, (a, b) in enumerate(zip(left, right, strict=True)):
        if isinstance(a, Axis) and isinstance(b, Axis):
            if a.uid != b.uid:
                out.append(JoinProblem("axes", i, a, b))
            continue
        if not (isinstance(a, Array) and isinstance(b, Array)):
            out.append(JoinProblem("category", i, a, b))
            continue
        if tuple(x.uid for x in a.shape) != tuple(x.uid for x in b.shape):
            out.append(JoinProblem("axes", i, a, b))
        elif a.datatype != b.datatype:
            kind = "leniency" if compatible(a.datatype, b.datatype) else "datatype"
            out.append(JoinProblem(kind, i, a, b))
    return out


__all__ = ["JoinProblem", "array_text", "axis_labels", "axis_text", "compare_objects",
           "objects_text", "size_text"]
