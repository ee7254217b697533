"""Elementwise formulas (``Arithmetic.formula``, docs/format.md §11.7) printed as torch expressions.

Sub-expressions that do not involve the operand are printed as plain Python scalar arithmetic
(``math.sqrt(self.c)``), the rest as torch calls; free constants are the module's constructor
arguments. ``log(x)/log(2)`` is printed as ``torch.log2`` (exact at powers of two, as the
reference interpreter evaluates it). The safe forms of :mod:`ir.rewrites` print as library
calls: ``SiLU`` as ``F.silu``, ``LogSumExp(a, c)`` as ``c + F.softplus(a - c, threshold=40.0)``
(``e^-40`` is below float64's resolution, so the linear tail is exact) or ``torch.logaddexp``.
"""
from __future__ import annotations

import sympy

from ncdc.ir.errors import SpecError
from ncdc.ir.numeric import FREE_INPUT, Ceiling, FreeNumeric, IsPositive, Sigmoid
from ncdc.ir.rewrites import LogSumExp, SiLU

SOFTPLUS_THRESHOLD = 40.0
"""``F.softplus`` returns ``x`` above this; ``log1p(e^-40)`` is below float64's resolution."""


def _prec(e) -> int:
    if e.is_Add:
        return 1
    if e.is_Mul or (e.is_Rational and not e.is_Integer):
        return 2
    if e.is_Pow:
        return 3
    return 4


class FormulaPrinter:
    def __init__(self, x: str, constant_code):
        self.x = x
        self.constant_code = constant_code

    def __call__(self, expr) -> str:
        return self.p(sympy.sympify(expr), 0)

    @staticmethod
    def _log2_of(e):
        """``a`` when ``e`` is ``log(a)/log(2)``, else None."""
        if not e.is_Mul or len(e.args) != 2:
            return None
        logs = [a for a in e.args if isinstance(a, sympy.log)]
        inv = [a for a in e.args if a.is_Pow and a.exp == -1 and a.base == sympy.log(2)]
        if len(logs) == 1 and len(inv) == 1:
            return logs[0].args[0]
        return None

    def tensor(self, e) -> bool:
        return FREE_INPUT in e.free_symbols

    def wrap(self, text: str, own: int, outer: int) -> str:
        return f"({text})" if own < outer else text

    def p(self, e, outer: int) -> str:  # noqa: C901 - one branch per kind of formula node
        t = self.tensor(e)
        if e == FREE_INPUT:
            return self.x
        if isinstance(e, FreeNumeric):
            return self.constant_code(e)
        if e.is_Integer:
            return self.wrap(str(int(e)), 4 if e >= 0 else 1, outer)
        if e.is_Rational:
            return self.wrap(f"{e.p} / {e.q}", 2, outer)
        if e.is_Float:
            return self.wrap(repr(float(e)), 4 if e >= 0 else 1, outer)
        if e == sympy.E:
            return "math.e"
        if e == sympy.pi:
            return "math.pi"
        if e == sympy.I:
            return "1j"
        if e == sympy.oo:
            return "math.inf"
        if e.is_Add:
            args = sorted(e.args, key=lambda a: (not self.tensor(a), a.is_Number,
                                                 sympy.default_sort_key(a)))
            out = self.p(args[0], 1)
            for a in args[1:]:
                coeff, _ = a.as_coeff_Mul()
                if coeff.is_negative:
                    out += " - " + self.p(-a, 2)
                else:
                    out += " + " + self.p(a, 1)
            return self.wrap(out, 1, outer)
        if e.is_Mul and self._log2_of(e) is not None:
            return self.call("log2", self._log2_of(e))
        if e.is_Mul:
            coeff, rest = e.as_coeff_Mul()
            if coeff == -1:
                return self.wrap("-" + self.p(rest, 3), 2, outer)
            num, den = [], []
            for f in e.as_ordered_factors():
                if f.is_Pow and f.exp.is_negative and f.exp.is_Number:
                    den.append(f.base ** (-f.exp))
                elif f.is_Rational and not f.is_Integer and f.p == 1:
                    den.append(sympy.Integer(f.q))
                else:
                    num.append(f)
            num.sort(key=lambda a: (not self.tensor(a), sympy.default_sort_key(a)))
            out = " * ".join(self.p(f, 2) for f in num) if num else "1"
            for d in den:
                out += " / " + self.p(d, 3)
            return self.wrap(out, 2, outer)
        if e.is_Pow:
            base, ex = e.base, e.exp
            if base == sympy.E:
                return self.call("exp", ex)
            if ex == sympy.Rational(1, 2):
                return self.call("sqrt", base)
            if ex == -1:
                return self.wrap(f"1 / {self.p(base, 3)}", 2, outer)
            if ex == sympy.Rational(-1, 2):
                return self.call("rsqrt", base) if t else f"1 / math.sqrt({self.p(base, 0)})"
            return self.wrap(f"{self.p(base, 4)} ** {self.p(ex, 4)}", 3, outer)
        if isinstance(e, sympy.exp):
            return self.call("exp", e.args[0])
        if isinstance(e, sympy.log):
            if len(e.args) != 1:
                raise SpecError(f"log with {len(e.args)} arguments in a formula")
            return self.call("log", e.args[0])
        if isinstance(e, sympy.Abs):
            return f"torch.abs({self.p(e.args[0], 0)})" if t else f"abs({self.p(e.args[0], 0)})"
        if isinstance(e, sympy.sign):
            if not t:
                raise SpecError("sign of a constant in a formula is not supported")
            return f"torch.sign({self.p(e.args[0], 0)})"
        if isinstance(e, Sigmoid):
            return f"torch.sigmoid({self.p(e.args[0], 0)})" if t else \
                f"1 / (1 + math.exp(-{self.p(e.args[0], 3)}))"
        if isinstance(e, SiLU):
            return f"F.silu({self.p(e.args[0], 0)})" if t else \
                self.p(e.args[0] * Sigmoid(e.args[0]), outer)
        if isinstance(e, LogSumExp):
            return self.log_sum_exp(e, outer)
        if isinstance(e, IsPositive):
            inner = self.p(e.args[0], 0)
            return f"({inner} > 0).to({self.x}.dtype)" if t else f"float({inner} > 0)"
        if isinstance(e, (Ceiling, sympy.ceiling)):
            return f"torch.ceil({self.p(e.args[0], 0)})" if t else \
                f"math.ceil({self.p(e.args[0], 0)})"
        if isinstance(e, sympy.floor):
            return f"torch.floor({self.p(e.args[0], 0)})" if t else \
                f"math.floor({self.p(e.args[0], 0)})"
        if isinstance(e, sympy.conjugate):
            return f"torch.conj_physical({self.p(e.args[0], 0)})"
        if isinstance(e, (sympy.Max, sympy.Min)):
            return self.extremum(e)
        raise SpecError(f"cannot print the formula term {sympy.sstr(e)} as torch code")

    def call(self, fn: str, arg) -> str:
        if self.tensor(arg):
            return f"torch.{fn}({self.p(arg, 0)})"
        if fn == "rsqrt":
            return f"1 / math.sqrt({self.p(arg, 0)})"
        return f"math.{fn}({self.p(arg, 0)})"

    def log_sum_exp(self, e, outer: int) -> str:
        """Tensors folded with ``torch.logaddexp``, constants ``c`` with ``c + softplus(. - c)``;
        constants alone as ``m + log(sum e^(a - m))`` with ``m`` their maximum."""
        tensors = [a for a in e.args if self.tensor(a)]
        scalars = [a for a in e.args if not self.tensor(a)]
        if not tensors:
            m = sympy.Max(*scalars)
            return self.p(m + sympy.log(sympy.Add(*(sympy.exp(a - m) for a in scalars))), outer)
        code = self.p(tensors[0], 0)
        for a in tensors[1:]:
            code = f"torch.logaddexp({code}, {self.p(a, 0)})"
        for c in scalars:
            if c == 0:
                code = f"F.softplus({code}, threshold={SOFTPLUS_THRESHOLD})"
            else:
                cc = self.p(c, 3)
                code = self.wrap(f"{self.p(c, 1)} + F.softplus({code} - {cc}, "
                                 f"threshold={SOFTPLUS_THRESHOLD})", 1, outer)
        return code

    def extremum(self, e) -> str:
        is_max = isinstance(e, sympy.Max)
        tensors = [a for a in e.args if self.tensor(a)]
        scalars = [a for a in e.args if not self.tensor(a)]
        if not tensors:
            return f"{'max' if is_max else 'min'}({', '.join(self.p(a, 0) for a in e.args)})"
        # clamp(x, lo, hi) reads best: Min(hi, Max(lo, x))
        if len(tensors) == 1 and len(scalars) <= 1:
            inner = tensors[0]
            bound = scalars[0] if scalars else None
            other = sympy.Min if is_max else sympy.Max
            if (isinstance(inner, other) and len(inner.args) == 2 and bound is not None
                    and sum(self.tensor(a) for a in inner.args) == 1):
                x = next(a for a in inner.args if self.tensor(a))
                b2 = next(a for a in inner.args if not self.tensor(a))
                lo, hi = (bound, b2) if is_max else (b2, bound)
                return f"torch.clamp({self.p(x, 0)}, {self.p(lo, 0)}, {self.p(hi, 0)})"
            if bound is None:
                return self.p(inner, 0)
            key = "min" if is_max else "max"
            return f"torch.clamp({self.p(inner, 0)}, {key}={self.p(bound, 0)})"
        fn = "torch.maximum" if is_max else "torch.minimum"
        code = self.p(tensors[0], 0)
        for a in tensors[1:]:
            code = f"{fn}({code}, {self.p(a, 0)})"
        if scalars:
            key = "min" if is_max else "max"
            lim = self.p(sympy.Max(*scalars) if is_max else sympy.Min(*scalars), 0)
            code = f"torch.clamp({code}, {key}={lim})"
        return code
