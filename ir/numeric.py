"""Symbolic numbers: sizes, strides, shifts, operator constants and elementwise formulas.

Every numeric of a spec is a sympy expression. A pyncd ``FreeNumeric`` is a :class:`FreeNumeric`
symbol whose identity is its uid (two symbols may share a display name). Formula-only nodes map to
sympy functions; the ones sympy lacks are defined here (:class:`Sigmoid`, :class:`IsPositive`,
:class:`Ceiling`). :data:`FREE_INPUT` stands for the operand of an ``Arithmetic`` formula.
"""
from __future__ import annotations

import sympy

from .names import Name


class FreeNumeric(sympy.Symbol):
    """A free size or constant symbol, identified by its pyncd uid."""

    __slots__ = ("display", "path", "uid")

    def __new__(cls, uid: int, display: Name | None = None, path: str = ""):
        label = display.text if display is not None else f"s{uid}"
        obj = sympy.Symbol.__xnew__(cls, f"{label}#{uid}")
        obj.uid = uid
        obj.display = display
        obj.path = path
        return obj

    def _hashable_content(self):
        return (self.name, self.uid)

    def __getnewargs__(self):
        return (self.uid, self.display, self.path)

    def __reduce_ex__(self, protocol):
        return (FreeNumeric, self.__getnewargs__())

    def _sympystr(self, printer):
        return self.label

    @property
    def label(self) -> str:
        return self.display.text if self.display is not None else f"s{self.uid}"

    @property
    def code_form(self) -> str | None:
        return self.display.code_form if self.display is not None else None

    @property
    def default(self) -> int | None:
        """Released value written as the name's exponent (``m^{5120}``), if any."""
        return self.display.default_value if self.display is not None else None


FREE_INPUT = sympy.Symbol("x_in")
"""The operand of an elementwise formula (pyncd ``FreeInput``)."""


class Sigmoid(sympy.Function):
    """Logistic function 1 / (1 + e^-a)."""

    nargs = 1

    @classmethod
    def eval(cls, a):
        if a.is_Number:
            return 1 / (1 + sympy.exp(-a))
        return None


class IsPositive(sympy.Function):
    """1 where a > 0, else 0."""

    nargs = 1

    @classmethod
    def eval(cls, a):
        if a.is_Number:
            return sympy.Integer(1 if a > 0 else 0)
        return None


class Ceiling(sympy.Function):
    """Smallest integer >= a (kept unevaluated on symbols so lowering sees it)."""

    nargs = 1

    @classmethod
    def eval(cls, a):
        if a.is_Number:
            return sympy.ceiling(a)
        return None


def free_symbols(expr) -> set[FreeNumeric]:
    """The :class:`FreeNumeric` symbols an expression depends on."""
    if not isinstance(expr, sympy.Basic):
        return set()
    return {s for s in expr.free_symbols if isinstance(s, FreeNumeric)}


# --------------------------------------------------------------------------- bounded evaluation

INT64_MAX = 2**63 - 1
"""Largest size, index, stride or element count an array may have (numpy's ``intp``)."""

MAX_BITS = 4096
"""Largest exact integer (or rational numerator/denominator) symbolic work ever builds. Sizes
are refused well below (``INT64_MAX``); the margin keeps intermediate products exact."""


class TooLarge(ArithmeticError):
    """An exact value would exceed :data:`MAX_BITS` bits (``2**(2**63)``, ``10**(10**30)``)."""


def _bits(x) -> int:
    if isinstance(x, sympy.Integer):
        return abs(int(x)).bit_length()
    if isinstance(x, sympy.Rational):
        return max(abs(x.p).bit_length(), x.q.bit_length())
    return 0


def power_bits(base, exponent) -> int | None:
    """An upper bound on the bits of the exact value ``base**exponent`` when both are numbers
    and the exponent is rational (None otherwise, or when the power is trivially small)."""
    if not (isinstance(exponent, sympy.Rational) and getattr(base, "is_number", False)):
        return None
    if base in (0, 1, -1) or exponent == 0:
        return None
    steps = abs(exponent.p) // exponent.q + 1
    if isinstance(base, sympy.Rational):
        return _bits(base) * steps
    return 2 * steps  # an algebraic or transcendental base: refuse only huge exponents


def bounded(expr, values=None, limit: int = MAX_BITS):
    """``expr`` with ``values`` (symbol -> sympy number) substituted and evaluated bottom-up,
    refusing (:class:`TooLarge`) any exact intermediate beyond ``limit`` bits before it is
    built. Unlike ``xreplace``, a bound ``2**d`` with ``d = 10**30`` costs nothing."""
    values = values or {}
    memo: dict = {}

    def go(e):
        hit = memo.get(e)
        if hit is not None:
            return hit
        if e.is_Atom:
            out = values.get(e, e) if isinstance(e, sympy.Symbol) else e
            if _bits(out) > limit:
                raise TooLarge(f"a literal of {_bits(out)} bits")
        else:
            args = [go(a) for a in e.args]
            if e.is_Pow:
                nb = power_bits(args[0], args[1])
                if nb is not None and nb > limit:
                    raise TooLarge(f"{sympy.sstr(args[0])}**{sympy.sstr(args[1])} would have "
                                   f"about {nb} bits")
            out = e if all(a is b for a, b in zip(args, e.args, strict=True)) and not e.is_Pow \
                else e.func(*args)
            if _bits(out) > limit:
                raise TooLarge(f"a value of {_bits(out)} bits")
        memo[e] = out
        return out

    return go(sympy.sympify(expr))
