"""Late binding: the values of free numerics, and exact evaluation of sizes under them."""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import sympy

from .errors import BindingError
from .numeric import INT64_MAX, MAX_BITS, FreeNumeric, TooLarge, bounded, free_symbols


class Env:
    """An immutable assignment of values to :class:`FreeNumeric` symbols.

    ``size`` evaluates an integral expression exactly (sizes, strides, shifts, k) and refuses
    a value outside int64; ``number`` evaluates a real/complex constant. Values are finite
    numbers (never strings); evaluation never builds an exact number beyond
    :data:`~ir.numeric.MAX_BITS` bits. Unbound symbols, non-numbers and overflows are a
    :class:`BindingError` naming the symbol."""

    def __init__(self, values: Mapping[FreeNumeric, object] | None = None):
        vals = {}
        for sym, v in (values or {}).items():
            if not isinstance(sym, FreeNumeric):
                raise TypeError(f"Env keys are FreeNumeric symbols, not {type(sym).__name__}")
            vals[sym] = number_value(v, sym.label)
        self._values = vals
        self._sizes: dict = {}
        self._numbers: dict = {}

    @property
    def values(self) -> dict[FreeNumeric, sympy.Expr]:
        return dict(self._values)

    def __contains__(self, sym) -> bool:
        return sym in self._values

    def __len__(self) -> int:
        return len(self._values)

    def with_values(self, more: Mapping[FreeNumeric, object]) -> Env:
        merged = dict(self._values)
        merged.update(more)
        return Env(merged)

    def subs(self, expr):
        """``expr`` with every bound symbol replaced and evaluated (bounded: a value beyond
        :data:`~ir.numeric.MAX_BITS` bits is a :class:`BindingError`)."""
        try:
            return bounded(expr, self._values)
        except TooLarge as exc:
            raise BindingError(f"{_text(expr)} is too large to evaluate ({exc})") from None
        except RecursionError:
            raise BindingError(f"{_text(expr)} is nested too deeply to evaluate") from None

    def missing(self, expr) -> set[FreeNumeric]:
        return free_symbols(self.subs(expr))

    def _bound(self, expr, what: str):
        """``expr`` with every symbol replaced by its value; unbound ones are an error."""
        val = self.subs(expr)
        left = free_symbols(val)
        if left:
            names = ", ".join(sorted(s.label for s in left))
            raise BindingError(f"unbound {what}: {names} (in {_text(expr)})")
        return val

    def size(self, expr) -> int:
        """Exact integer value of ``expr``."""
        key = expr
        hit = self._sizes.get(key)
        if hit is not None:
            return hit
        val = self._bound(expr, "size symbol(s)")
        if not val.is_Integer:
            try:
                val = sympy.nsimplify(val) if val.is_finite else val
            except (TypeError, ValueError, ArithmeticError):
                pass
            if not val.is_Integer:
                raise BindingError(f"{_equals(expr, val)} is not an integer")
        out = int(val)
        if not -INT64_MAX <= out <= INT64_MAX:
            raise BindingError(f"{_equals(expr, _digits(out))} is outside int64 (at most "
                               f"2**63 - 1)")
        self._sizes[key] = out
        return out

    def sizes(self, axes) -> tuple[int, ...]:
        return tuple(self.size(a.size) for a in axes)

    def number(self, expr) -> float | complex:
        """Floating value of a constant expression."""
        hit = self._numbers.get(expr)
        if hit is not None:
            return hit
        val = self._bound(expr, "constant(s)")
        try:
            c = complex(val.evalf(30))
        except (TypeError, ValueError, OverflowError):
            raise BindingError(f"{_text(expr)} = {_text(val)} is not a number") from None
        out = c.real if c.imag == 0 else c
        self._numbers[expr] = out
        return out


def number_value(v, name: str = "value") -> sympy.Expr:
    """A bound value as an exact sympy number: ints and integral floats exactly, other floats
    as floats; NaN, infinities, non-numbers and integers beyond
    :data:`~ir.numeric.MAX_BITS` bits are a :class:`BindingError` naming ``name``."""
    if isinstance(v, bool) or not isinstance(v, (numbers.Number, sympy.Basic)):
        raise BindingError(f"{name} = {v!r}: a value must be a number, not "
                           f"{type(v).__name__}")
    if isinstance(v, sympy.Basic):
        if not v.is_number or free_symbols(v):
            raise BindingError(f"{name} = {_text(v)}: a value must be a number")
        if v.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
            raise BindingError(f"{name} = {_text(v)} is not finite")
        try:
            return bounded(v)
        except TooLarge:
            raise BindingError(f"{name}: the value is too large") from None
    if isinstance(v, numbers.Integral):
        v = int(v)
        if v.bit_length() > MAX_BITS:
            raise BindingError(f"{name} = {_digits(v)} is too large")
        return sympy.Integer(v)
    if isinstance(v, numbers.Complex) and not isinstance(v, numbers.Real):
        if not (math.isfinite(v.real) and math.isfinite(v.imag)):
            raise BindingError(f"{name} = {v!r} is not finite")
        return sympy.sympify(complex(v))
    f = float(v)  # type: ignore[arg-type]  # a real number here (complex handled above)
    if not math.isfinite(f):
        raise BindingError(f"{name} = {v!r} is not finite")
    if f == int(f) and abs(f) < 2.0**63:
        return sympy.Integer(int(f))
    return sympy.Float(f) if isinstance(v, float) else sympy.nsimplify(v)


def _digits(n: int) -> str:
    """An integer as text, abbreviated past 30 digits (never Python's 4300-digit limit)."""
    if n.bit_length() < 100:
        return str(n)
    return f"about 2**{n.bit_length() - 1}"


def _text(expr) -> str:
    """An expression as short text for messages; one holding an integer literal past
    :data:`~ir.numeric.MAX_BITS` bits is not printed (printing it costs time quadratic in its
    digits wherever Python's digit limit is lifted)."""
    try:
        ints = sympy.sympify(expr).atoms(sympy.Integer)
        if any(abs(int(a)).bit_length() > MAX_BITS for a in ints):
            return "(an expression too large to print)"
        t = sympy.sstr(expr)
    except (ValueError, RecursionError):
        return "(an expression too large to print)"
    return t if len(t) <= 200 else t[:197] + "..."


def _equals(expr, val) -> str:
    """``expr = val``, or just ``val`` when the two read the same."""
    a, b = _text(expr), val if isinstance(val, str) else _text(val)
    return b if a == b else f"{a} = {b}"
