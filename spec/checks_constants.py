"""Check of the literal constants operators compute with: each must be a value both backends
represent (code ``constant-invalid``, an error).

* an Iverson predicate's integer literal (``IversonConst``) is compared and combined with index
  values, which are int64 in both backends: ``-2**63 < v <= 2**63 - 1``;
* an elementwise formula (``Arithmetic.formula``) is evaluated in float64 (complex128 where it
  holds ``i``): each of its constant subexpressions (no operand, no symbol) evaluates, within
  :data:`ir.numeric.MAX_BITS` bits, to an infinity or a number whose parts are within the
  float64 range (``±1.8e308``; ``10**400`` is refused), and no ordering (``Max``, ``Min``,
  ``IsPositive``, ``Ceiling``, floor, comparisons) takes an argument holding ``i``
  (``Max(i, x)``: complex numbers are not ordered).
"""
from __future__ import annotations

import math

import sympy

from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.numeric import INT64_MAX, Ceiling, IsPositive, TooLarge, bounded
from ncdc.ir.operators.tensorlogic import IversonBinOp, IversonConst, IversonUnaryOp

_FLOAT_MAX = 1.7976931348623157e308
_ORDERINGS = (sympy.Max, sympy.Min, sympy.floor, sympy.ceiling, sympy.Heaviside,
              sympy.core.relational.Relational, IsPositive, Ceiling)


def _text(expr) -> str:
    """A short text of ``expr``; a literal too long to print is named by its size."""
    big = max((abs(int(a)).bit_length() for a in expr.atoms(sympy.Integer)), default=0)
    if big > 256:
        return f"(an expression holding a literal of {big} bits)"
    return sympy.sstr(expr)[:60]


def _iverson_consts(expr):
    """The integer literals of a predicate tree, left to right."""
    stack, out = [expr], []
    while stack:
        e = stack.pop()
        if isinstance(e, IversonConst):
            out.append(e.value)
        elif isinstance(e, IversonBinOp):
            stack += [e.rhs, e.lhs]
        elif isinstance(e, IversonUnaryOp):
            stack.append(e.operand)
    return out


def _constant_parts(formula):
    """The maximal subexpressions of ``formula`` without free symbols."""
    stack, out = [sympy.sympify(formula)], []
    while stack:
        e = stack.pop()
        if not e.free_symbols:
            out.append(e)
        else:
            stack.extend(e.args)
    return out


def formula_problem(formula) -> str | None:
    """Why a formula cannot be computed in float64 (or complex128), or None."""
    formula = sympy.sympify(formula)
    for e in sympy.preorder_traversal(formula):
        if isinstance(e, _ORDERINGS) and any(a.has(sympy.I) for a in e.args):
            return (f"{_text(e)} orders a complex value (only real numbers are "
                    "ordered)")
    for part in _constant_parts(formula):
        text = _text(part)
        try:
            value = bounded(part)
        except TooLarge as exc:
            return f"the constant {text} is too large to evaluate ({exc})"
        if value.has(sympy.zoo, sympy.oo, -sympy.oo, sympy.nan):
            continue
        try:
            number = complex(sympy.N(value))
        except (TypeError, ValueError):
            return f"the constant {text} does not evaluate to a number"
        if all(math.isfinite(x) and abs(x) <= _FLOAT_MAX for x in (number.real, number.imag)):
            continue
        return f"the constant {text} is beyond the float64 range (±1.8e308)"
    return None


_JUDGEMENTS: dict = {}
"""``formula_problem`` of formulas judged before, by the formula (sympy expressions are immutable
and compare by structure; the judgement depends on nothing else)."""


def _judged(formula) -> str | None:
    """``formula_problem(formula)``, from the memo where it was judged before."""
    try:
        return _JUDGEMENTS[formula]
    except KeyError:
        pass
    except TypeError:  # (unhashable: judged every time)
        return formula_problem(formula)
    problem = formula_problem(formula)
    if len(_JUDGEMENTS) < 4096:
        _JUDGEMENTS[formula] = problem
    return problem


def _formulas(op):
    """The formulas of an operator and of the operator it wraps (a TensorEquation's)."""
    while op is not None:
        formula = getattr(op, "formula", None)
        if isinstance(formula, sympy.Basic):
            yield op, formula
        op = getattr(op, "operator", None)


def check_constants(ck, sites) -> None:
    """``constant-invalid`` for every Iverson literal outside int64 and every formula constant
    that float64 cannot hold, at each Broadcasted site. (A formula object met again, as
    operators share them, is judged once; kept alive with its judgement, so ids stay
    unique. Equal formulas share a judgement across calls: ``_judged``.)"""
    judged: dict[int, tuple] = {}
    for s in sites:
        node = s.node
        if not isinstance(node, Broadcasted):
            continue
        op = node.operator
        path = getattr(op, "path", "") or s.path
        for factor in getattr(op, "rhs", ()) or ():
            for value in _iverson_consts(factor):
                if not (isinstance(value, sympy.Integer) and -INT64_MAX <= int(value)
                        <= INT64_MAX):
                    ck.error("constant-invalid", f"the Iverson predicate's literal "
                             f"{_text(value)} is outside the int64 index range "
                             "(|value| <= 2**63 - 1)", path, s.titles)
                    break
        for inner, formula in _formulas(op):
            hit = judged.get(id(formula))
            if hit is None:
                hit = judged[id(formula)] = (formula, _judged(formula))
            problem = hit[1]
            if problem is not None:
                ck.error("constant-invalid", f"in the formula of {type(inner).__name__}: "
                         f"{problem}", getattr(inner, "path", "") or path, s.titles)


__all__ = ["check_constants", "formula_problem"]
