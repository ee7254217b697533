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
