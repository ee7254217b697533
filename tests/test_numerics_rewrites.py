"""Numerically safe formulas (ir/rewrites.py): each rule is exact (the interpreter's safe and
literal lowerings agree on ordinary inputs), and on extreme inputs the interpreter and the
printed torch code in every dtype stay finite and close to a 4500-digit mpmath evaluation of the
*literal* formula (mpmath's exponent range does not overflow)."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import sympy

from ncdc.codegen.formula import FormulaPrinter
from ncdc.interpreter.formulas import lower
from ncdc.ir.env import Env
from ncdc.ir.numeric import FREE_INPUT as X
from ncdc.ir.numeric import Sigmoid
from ncdc.ir.rewrites import RULES, LogSumExp, SiLU, stable
from tests.lazy import F, torch

E = sympy.exp
FORMULAS = {
    "softplus root (Expert Gate)": sympy.sqrt(sympy.log(E(X) + 1)),
    "softplus": sympy.log(1 + E(X)),
    "log-sum-exp with weights": sympy.log(2 * E(X) + 3),
    "log-sum-exp of two tensors": sympy.log(E(X) + E(2 * X)),
    "sigmoid": 1 / (1 + E(-X)),
    "sigmoid as a ratio": E(X) / (1 + E(X)),
    "doubled sigmoid": 2 * Sigmoid(X),
    "silu": X * Sigmoid(X),
    "silu as a ratio": X / (1 + E(-X)),
    "log-sigmoid": sympy.log(Sigmoid(X)),
    "log of a literal sigmoid": sympy.log(1 / (1 + E(-X))),
}
EXTREME = np.array([-1e4, -800.0, -100.0, -30.0, -1.0, -1e-30, 0.0, 1e-30, 0.5, 30.0, 100.0,
                    800.0, 1e4])
U = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def _oracle(formula, xs) -> np.ndarray:
    """The literal formula at 4500 digits (Sigmoid spelled out)."""
    literal = formula.replace(Sigmoid, lambda a: 1 / (1 + sympy.exp(-a)))
    fn = sympy.lambdify(X, literal, modules="mpmath")
    with mpmath.workdps(4500):  # 1 + e^-10000 keeps its tail
        return np.array([float(fn(mpmath.mpf(float(x)))) for x in xs])


def test_each_rule_fires_where_it_should():
    assert stable(FORMULAS["softplus"]) == LogSumExp(0, X)
    assert stable(FORMULAS["softplus root (Expert Gate)"]) == sympy.sqrt(LogSumExp(0, X))
    assert stable(FORMULAS["sigmoid"]) == Sigmoid(X)
    assert stable(FORMULAS["sigmoid as a ratio"]) == Sigmoid(X)
    assert stable(FORMULAS["silu"]) == SiLU(X)
    assert stable(FORMULAS["silu as a ratio"]) == SiLU(X)
    assert stable(FORMULAS["log-sigmoid"]) == -LogSumExp(0, -X)
    assert stable(E(X)) == E(X)  # a bare exponential is left alone
    assert stable(sympy.log(X + 1)) == sympy.log(X + 1)  # no exponential inside
    assert stable(sympy.log(E(X) - 1)) == sympy.log(E(X) - 1)  # negative term: no rule
    assert {name for name, _ in RULES} >= {"log-sum-exp", "sigmoid", "silu",
                                           "min of a difference"}


def test_min_of_a_difference_is_exact_where_the_literal_form_rounds():
    """``x - ReLU(x - lam)`` (the SwiGLU limit as the diagram draws it) is ``Min(x, lam)``; in
    bfloat16 the literal form loses ``lam`` once ``x`` is large (``1000 - 992 = 8``), the safe
    form returns ``lam`` itself, as the real-valued formula does."""
    lam = sympy.Symbol("lam")
    literal = X - sympy.Max(X - lam, 0)
    assert stable(literal) == sympy.Min(X, lam)
    assert stable(3 + literal) == sympy.Min(X + 3, lam + 3)
    assert stable(X - sympy.Max(2 * X - lam, 0)) == sympy.Min(X, lam - X)
    assert stable(X - sympy.Max(X - lam, 1)) == X - sympy.Max(X - lam, 1)
    xs = torch.tensor([-3.0, 0.0, 9.5, 10.0, 12.0, 1000.0], dtype=torch.bfloat16)
    want = torch.tensor([-3.0, 0.0, 9.5, 10.0, 10.0, 10.0], dtype=torch.bfloat16)
    assert torch.equal(xs - torch.clamp(xs - 10, min=0), want) is False  # the literal rounds
    ten = X - sympy.Max(X - 10, 0)
    code = FormulaPrinter("x", str)(stable(ten))
    assert torch.equal(eval(code, {"torch": torch, "x": xs}), want)  # noqa: S307
    assert np.array_equal(lower(ten, Env())(xs.double().numpy()), want.double().numpy())


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_safe_form_equals_literal_on_ordinary_inputs(name):
    f = FORMULAS[name]
    xs = np.random.default_rng(0).uniform(-6, 6, 200)
    safe, literal = lower(f, Env())(xs), lower(f, Env(), stable=False)(xs)
    assert np.allclose(safe, literal, rtol=1e-12, atol=1e-300)
    # and the rewritten expression is the same function symbolically, at sample points
    g = stable(f).replace(LogSumExp, lambda *a: sympy.log(sum(sympy.exp(t) for t in a)))
    g = g.replace(SiLU, lambda a: a * Sigmoid(a))
    for x in (sympy.Rational(-5, 2), sympy.Rational(3, 10), sympy.Integer(4)):
        assert abs(float((g - f).subs(X, x).replace(
            Sigmoid, lambda a: 1 / (1 + sympy.exp(-a))).evalf(30))) < 1e-25


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_interpreter_is_finite_and_exact_on_extreme_inputs(name):
    f = FORMULAS[name]
    want = _oracle(f, EXTREME)
    got = lower(f, Env())(EXTREME)
    assert np.all(np.isfinite(got)), got
    # e^-800 underflows float64 even in the safe form; its square root (1e-174) then reads 0
    assert np.all(np.abs(got - want) <= 4e-16 * np.abs(want) + 1e-150)


def _torch_code(formula) -> str:
    return FormulaPrinter("x", lambda s: str(s))(stable(formula))


@pytest.mark.parametrize("dtype", list(U))
@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_generated_code_is_finite_in_every_dtype(name, dtype):
    u, dtype = U[dtype], getattr(torch, dtype)
    f = FORMULAS[name]
    code = _torch_code(f)
    limit = torch.finfo(dtype).max
    xs = EXTREME[np.abs(EXTREME) * (2 if "two tensors" in name else 1) < limit / 4]
    x = torch.tensor(xs, dtype=torch.float64).to(dtype)
    xr = x.double().numpy()  # the values the dtype holds
    got = eval(code, {"torch": torch, "F": F, "math": math, "x": x})
    assert got.dtype == dtype
    got = got.double().numpy()
    want = _oracle(f, xr)
    assert np.all(np.isfinite(got)), (code, got)
    # conditioning of e^x-type functions: a relative input error u becomes |x| u
    # (and a root of an underflowed e^-800 reads 0: absolute slack sqrt(tiny))
    tol = 8 * u * (1 + np.abs(xr)) * np.abs(want) + torch.finfo(dtype).tiny ** 0.5
    assert np.all(np.abs(got - want) <= tol), (code, got, want)


def test_literal_softplus_overflowed_before():
    """The oracle is needed: the literal form overflows exactly where the issue saw NaN."""
    f = FORMULAS["softplus root (Expert Gate)"]
    assert np.isinf(lower(f, Env(), stable=False)(np.array([800.0])))[0]
    x = torch.tensor([100.0], dtype=torch.float32)
    assert torch.isinf(torch.sqrt(torch.log(torch.exp(x) + 1)))[0]
    assert torch.isfinite(eval(_torch_code(f), {"torch": torch, "F": F, "x": x}))[0]


def test_printed_forms_read_like_library_calls():
    assert _torch_code(FORMULAS["silu"]) == "F.silu(x)"
    assert _torch_code(FORMULAS["softplus"]) == "F.softplus(x, threshold=40.0)"
    assert _torch_code(FORMULAS["sigmoid as a ratio"]) == "torch.sigmoid(x)"
    assert _torch_code(FORMULAS["log-sum-exp of two tensors"]) == "torch.logaddexp(x, x * 2)"
