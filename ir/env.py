"""Late binding: the values of free numerics, and exact evaluation of sizes under them."""
from __future__ import annotations

from collections.abc import Mapping

import sympy

from .errors import BindingError
from .numeric import FreeNumeric, free_symbols


class Env:
    """An immutable assignment of values to :class:`FreeNumeric` symbols.

    ``size`` evaluates an integral expression exactly (sizes, strides, shifts, k);
    ``number`` evaluates a real/complex constant. Unbound symbols are a
    :class:`BindingError` naming them."""

    def __init__(self, values: Mapping[FreeNumeric, object] | None = None):
        vals = {}
        for sym, v in (values or {}).items():
            if not isinstance(sym, FreeNumeric):
                raise TypeError(f"Env keys are FreeNumeric symbols, not {type(sym).__name__}")
            vals[sym] = sympy.nsimplify(v) if isinstance(v, float) and v == int(v) else \
                sympy.sympify(v)
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
        return sympy.sympify(expr).xreplace(self._values)

    def missing(self, expr) -> set[FreeNumeric]:
        return free_symbols(self.subs(expr))

    def _bound(self, expr, what: str):
        """``expr`` with every symbol replaced by its value; unbound ones are an error."""
        val = self.subs(expr)
        left = free_symbols(val)
        if left:
            names = ", ".join(sorted(s.label for s in left))
            raise BindingError(f"unbound {what}: {names} (in {sympy.sstr(expr)})")
        return val

    def size(self, expr) -> int:
        """Exact integer value of ``expr``."""
        key = expr
        hit = self._sizes.get(key)
        if hit is not None:
            return hit
        val = self._bound(expr, "size symbol(s)")
        if not val.is_Integer:
            val = sympy.nsimplify(val)
            if not val.is_Integer:
                raise BindingError(f"{sympy.sstr(expr)} = {val} is not an integer")
        out = int(val)
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
        c = complex(val.evalf(30))
        out = c.real if c.imag == 0 else c
        self._numbers[expr] = out
        return out
