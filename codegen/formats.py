"""When emulate-mode rounding is the identity, so the generated code leaves it out: a value held
in an encoding every value of which another encoding holds exactly, rounded to that other one
(``widens``), and the result of an operator that only moves, negates or takes magnitudes of its
inputs' values, rounded to a format holding them (``exact``)."""
from __future__ import annotations

import sympy

from ncdc.ir.numeric import FREE_INPUT, IsPositive
from ncdc.ir.operators import Arithmetic, Decomplex, Identity, PairsAsComplex, View

_MINIFLOATS = frozenset({"E4M3", "E5M2", "E2M1"})

# every value of each encoding on the right is a value of the one on the left (element formats
# only: an MX block scale can take a value past the wider format's range, so block-scaled
# values are never listed)
CONTAINS = {
    "FP32": frozenset({"FP32", "BF16", "FP16", "UE8M0"}) | _MINIFLOATS,
    "BF16": frozenset({"BF16", "UE8M0"}) | _MINIFLOATS,
    "FP16": frozenset({"FP16"}) | _MINIFLOATS,
}


def exact(operator) -> bool:
    """True for an operator every output value of which is an input value, its magnitude,
    negation or conjugate, a part of it, 0 or 1 (a view, a complex/pairs conversion, ``|x|``,
    ``-x``, ``1[x > 0]``): rounding its result to a format holding its inputs is the identity."""
    if isinstance(operator, (View, Decomplex, PairsAsComplex, Identity)):
        return True
    if isinstance(operator, Arithmetic):
        f, x = operator.formula, FREE_INPUT
        return f.free_symbols == {x} and f in (sympy.Abs(x), -x, sympy.conjugate(x),
                                                IsPositive(x))
    return False


def key(encoding: str, channels: str | None = None) -> str:
    """The name a rounding is recorded under: the encoding, or ``E4M3/32``-style for MX."""
    return encoding if channels is None else f"{encoding}/{channels}"


def widens(held_in: str | None, encoding: str) -> bool:
    """True when a value held in ``held_in`` is unchanged by rounding to ``encoding``."""
    return held_in is not None and (held_in == encoding or held_in in CONTAINS.get(encoding, ()))
