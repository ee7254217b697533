"""Which storage encodings hold every value of another exactly, so that rounding a value already
held in the narrower one to the wider one is the identity (emulate mode can skip it)."""
from __future__ import annotations

_MINIFLOATS = frozenset({"E4M3", "E5M2", "E2M1"})

# every value of each encoding on the right is a value of the one on the left (element formats
# only: an MX block scale can take a value past the wider format's range, so block-scaled
# values are never listed)
CONTAINS = {
    "FP32": frozenset({"FP32", "BF16", "FP16", "UE8M0"}) | _MINIFLOATS,
    "BF16": frozenset({"BF16", "UE8M0"}) | _MINIFLOATS,
    "FP16": frozenset({"FP16"}) | _MINIFLOATS,
}


def key(encoding: str, channels: str | None = None) -> str:
    """The name a rounding is recorded under: the encoding, or ``E4M3/32``-style for MX."""
    return encoding if channels is None else f"{encoding}/{channels}"


def widens(held_in: str | None, encoding: str) -> bool:
    """True when a value held in ``held_in`` is unchanged by rounding to ``encoding``."""
    return held_in is not None and (held_in == encoding or held_in in CONTAINS.get(encoding, ()))
