"""Elementwise formulas (``Arithmetic.formula``, docs/format.md §11.7) lowered once to vectorised
numpy through ``sympy.lambdify`` — never walked per element.

Free constants (epsilons, ``\\lambda``, ``\\tau``, sizes such as ``|c|``) are substituted from the
env first; a symbol left unbound is a :class:`~ir.errors.BindingError`. The functions sympy
lacks or numpy spells differently are mapped explicitly:

=================  ==========================================================================
``Sigmoid(a)``     ``e / (1 + e)`` or ``1 / (1 + e)`` with ``e = exp(-|a|)`` (never overflows)
``LogSumExp``      ``numpy.logaddexp`` folded over the arguments (softplus: ``logaddexp(a, 0)``)
``SiLU(a)``        ``a * Sigmoid(a)``
``IsPositive(a)``  ``1.0`` where ``a > 0`` else ``0.0``
``Ceiling(a)``     ``numpy.ceil``
``Max``/``Min``    elementwise ``numpy.maximum`` / ``numpy.minimum`` folded over the arguments
``sign``           ``numpy.sign``; ``Abs`` ``numpy.abs``; ``conjugate`` ``numpy.conj``
``log(a)/log(2)``  ``numpy.log2(a)`` (exact at powers of two, so ``ceil(log2 x)`` of the FP8
                   scale recipe matches the released kernel; docs/format.md writes ``Logarithm(b, a)``
                   as ``log(a)/log(b)``)
=================  ==========================================================================

Before lowering, :func:`ir.rewrites.stable` puts the formula in its numerically safe form
(equal in real arithmetic; ``lower(..., stable=False)`` evaluates the literal formula, with the
textbook ``Sigmoid`` ``1 / (1 + exp(-a))``, for tests that compare the two).

Floating-point warnings are silenced: NaN/inf at live positions are the formula's value (and
propagate); dead positions are zeroed afterwards by the rule.
"""
from __future__ import annotations

from functools import reduce

import numpy as np
import sympy
from sympy.codegen.rewriting import log2_opt, optimize

from ncdc.ir.env import Env
from ncdc.ir.errors import BindingError
from ncdc.ir.numeric import FREE_INPUT, free_symbols
from ncdc.ir.rewrites import stable as stable_form

_EMax = sympy.Function("_elementwise_max")
_EMin = sympy.Function("_elementwise_min")


def _sigmoid(a):
    """The logistic function from ``exp(-|a|)`` only: no overflow at any ``a``."""
    a = np.asarray(a)
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _sigmoid_literal(a):
    return 1.0 / (1.0 + np.exp(-a))


def _is_positive(a):
    return np.where(np.real(a) > 0, 1.0, 0.0)


NUMPY_FUNCTIONS = {
    "_elementwise_max": lambda *a: reduce(np.maximum, a),
    "_elementwise_min": lambda *a: reduce(np.minimum, a),
    "Sigmoid": _sigmoid,
    "LogSumExp": lambda *a: reduce(np.logaddexp, a),
    "SiLU": lambda a: a * _sigmoid(a),
    "IsPositive": _is_positive,
    "Ceiling": np.ceil,
    "ceiling": np.ceil,
    "sign": np.sign,
    "Abs": np.abs,
    "conjugate": np.conj,
}

LITERAL_FUNCTIONS = {**NUMPY_FUNCTIONS, "Sigmoid": _sigmoid_literal}
"""The same table with the textbook sigmoid (``stable=False``)."""


def prepare(formula, env: Env) -> sympy.Expr:
    """The formula with every free constant substituted (only the operand left)."""
    expr = env.subs(formula)
    left = free_symbols(expr)
    if left:
        names = ", ".join(sorted(s.label for s in left))
        raise BindingError(f"unbound constant(s) {names} in the formula {sympy.sstr(formula)}")
    return expr


_CACHE: dict = {}
"""Prepared expression -> lowered function (formulas repeat: ``e^x``, ``x + eps_hc``, ...)."""


def lower(formula, env: Env, stable: bool = True):
    """A vectorised function ``f(x: ndarray) -> ndarray`` evaluating ``formula`` (in its safe
    form unless ``stable`` is False)."""
    expr = prepare(formula, env)
    if stable:
        expr = stable_form(expr)
    hit = _CACHE.get((expr, stable))
    if hit is None:
        hit = _CACHE[(expr, stable)] = _lambdify(expr, stable)
    return hit


def _lambdify(expr, stable: bool = True):
    if expr.has(sympy.log):
        expr = optimize(expr, [log2_opt])
    if expr.has(sympy.Max, sympy.Min):
        expr = expr.replace(sympy.Max, lambda *a: _EMax(*a)).replace(
            sympy.Min, lambda *a: _EMin(*a))
    fn = sympy.lambdify([FREE_INPUT], expr, modules=[NUMPY_FUNCTIONS if stable else LITERAL_FUNCTIONS, "numpy"])
    constant = FREE_INPUT not in expr.free_symbols

    def apply(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            y = np.asarray(fn(x))
        if constant or y.shape != x.shape:
            y = np.broadcast_to(y, np.broadcast_shapes(y.shape, x.shape))
        return y

    apply.expr = expr
    return apply
