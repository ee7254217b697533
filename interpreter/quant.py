"""Numpy rounding to the storage formats of pyncd's quantisation layer (docs/format.md §12).

Every function is pure and vectorised.  Float formats return a float64 array holding the
value the format denotes (the rounded number, not its bit pattern); the integer formats
return int64.  The output has the input's shape.

Overflow policy (see each docstring):

* FP32, FP16, BF16 follow IEEE round-to-nearest-even: a magnitude that rounds past the
  largest finite value becomes ±inf; inf stays inf, NaN stays NaN.
* E4M3, E5M2, E2M1 *saturate*: magnitudes beyond the format's largest value (±inf included)
  become ±max.  This is a deliberate choice matching the "Cast to MXFP8" description of the
  seed (docs/format.md §12.2); NaN stays NaN.
* INT32 / INT64 round half to even, then saturate to the integer range; NaN raises.

``codegen/prelude/quant.py`` implements the same rules for torch tensors, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "ELEMENT_MAX",
    "mx_block_round",
    "round_bf16",
    "round_e2m1",
    "round_e4m3",
    "round_e5m2",
    "round_fp16",
    "round_fp32",
    "round_int32",
    "round_int64",
    "round_to",
    "round_ue8m0",
]

#: Largest finite magnitude of each element format usable inside an MX block.
ELEMENT_MAX = {"E4M3": 448.0, "E5M2": 57344.0, "E2M1": 6.0}


def _as_f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _round_minifloat(x, mant_bits: int, min_exp: int, max_val: float, saturate: bool):
    """Round to a binary float with ``mant_bits`` stored mantissa bits, smallest normal
    exponent ``min_exp`` (subnormals below it) and largest finite value ``max_val``.

    Round-to-nearest-even, computed exactly in float64: the quantum at |x| is
    2^(max(floor(log2|x|), min_exp) - mant_bits), obtained from ``frexp`` (no log2), and
    ``rint`` (ties to even) rounds |x| / quantum.  Scaling by powers of two is exact.
    Overflow: if ``saturate``, |x| > max_val gives ±max_val; otherwise anything rounding past
    max_val gives ±inf (IEEE).  NaN stays NaN; the sign (including -0.0) is kept.
    """
    x = _as_f64(x)
    # Capping first keeps everything finite; 2*max_val still rounds to inf when not saturating.
    cap = max_val if saturate else 2.0 * max_val
    a = np.minimum(np.abs(x), cap)
    _, e = np.frexp(a)  # a = m * 2^e, m in [0.5, 1)  =>  floor(log2 a) = e - 1
    q = np.maximum(e - 1, min_exp) - mant_bits
    r = np.ldexp(np.rint(np.ldexp(a, -q)), q)
    if not saturate:
        r = np.where(r > max_val, np.inf, r)
    return np.copysign(r, x)


def round_fp32(x) -> np.ndarray:
    """Round to IEEE binary32 (RNE); overflow → ±inf, NaN stays NaN.  Returns float64."""
    with np.errstate(over="ignore"):
        return _as_f64(x).astype(np.float32).astype(np.float64)


def round_fp16(x) -> np.ndarray:
    """Round directly (no intermediate float32) to IEEE binary16: 10 mantissa bits, smallest
    normal 2^-14, subnormals down to 2^-24, RNE.  Magnitudes rounding past 65504 (i.e.
    |x| >= 65520) give ±inf as IEEE does; inf stays inf, NaN stays NaN."""
    return _round_minifloat(x, 10, -14, 65504.0, saturate=False)


def round_bf16(x) -> np.ndarray:
    """Round to bfloat16: first to float32 (RNE), then round-to-nearest-even on the low 16 bits
    of the binary32 pattern (add 0x7FFF + the kept lsb, clear the low 16 bits).

    A carry out of the largest finite bfloat16 (3.3895e38) lands on the infinity pattern, so
    overflow rounds to ±inf exactly as IEEE RNE does.  inf stays inf; NaN stays NaN (handled
    separately so the carry cannot turn a NaN into an infinity)."""
    with np.errstate(over="ignore"):
        f = _as_f64(x).astype(np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    r = u.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(f), f, r).astype(np.float64)


def round_e4m3(x) -> np.ndarray:
    """Round to OCP E4M3FN: bias 7, 3 mantissa bits, no infinities, smallest normal 2^-6,
    subnormals down to 2^-9, RNE.

    Saturating: |x| > 448 (±inf included) gives ±448.  This is a deliberate choice matching
    the seed's "Cast to MXFP8" description (docs/format.md §12.2), not the NaN that a plain
    non-saturating E4M3FN conversion produces.  NaN stays NaN."""
    return _round_minifloat(x, 3, -6, 448.0, saturate=True)


def round_e5m2(x) -> np.ndarray:
    """Round to OCP E5M2: bias 15, 2 mantissa bits, smallest normal 2^-14, subnormals down to
    2^-16, RNE.  Saturating: |x| > 57344 (±inf included) gives ±57344.  NaN stays NaN."""
    return _round_minifloat(x, 2, -14, 57344.0, saturate=True)


def round_e2m1(x) -> np.ndarray:
    """Round to OCP E2M1 (FP4): magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} with sign, RNE
    (e.g. 2.5 → 2, 5 → 4, 0.25 → 0, 0.75 → 1).  Saturating: |x| > 6 (±inf included) gives ±6.
    NaN stays NaN."""
    return _round_minifloat(x, 1, 0, 6.0, saturate=True)


def round_ue8m0(x) -> np.ndarray:
    """Round a positive scale to UE8M0, an unsigned power of two 2^e with e in [-127, 127].

    Rule: nearest power of two in the log domain, ties up: with x = m·2^e (m in [0.5, 1)),
    the result is 2^e if m >= 2^-1/2 and 2^(e-1) otherwise (computed exactly via ``frexp``;
    an exact log-domain tie cannot occur for a finite float).  The exponent saturates to
    [-127, 127], so 0 gives 2^-127 and +inf gives 2^127.  Negative inputs and NaN give NaN
    (the format's only non-finite code).  This is for a plain TypeConvert to UE8M0; the MX
    recipe in :func:`mx_block_round` uses the ceiling instead."""
    x = _as_f64(x)
    a = np.clip(x, 0.0, 2.0**128)  # NaN passes through
    m, e = np.frexp(a)
    e = np.where(m >= math.sqrt(0.5), e, e - 1)
    e = np.where(a == 0, -127, np.clip(e, -127, 127))
    r = np.ldexp(1.0, e)
    return np.where((x < 0) | np.isnan(x), np.nan, r)


def _round_int(x, lo: int, hi: int) -> np.ndarray:
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.integer) or x.dtype == np.bool_:
        return np.clip(x.astype(np.int64), lo, hi)
    x = x.astype(np.float64)
    if np.isnan(x).any():
        raise ValueError("cannot round NaN to an integer format")
    r = np.rint(x)
    over = r >= float(hi) + 1.0  # float(2**63 - 1) == 2**63: compare against hi + 1 exactly
    under = r <= float(lo)
    mid = np.where(over | under, 0.0, r).astype(np.int64)
    return np.where(over, np.int64(hi), np.where(under, np.int64(lo), mid))


def round_int32(x) -> np.ndarray:
    """Round half to even, then saturate to [-2^31, 2^31 - 1]; returns int64.  Integer inputs
    are only saturated.  ±inf saturate; NaN raises ValueError (no integer denotes it)."""
    return _round_int(x, -(2**31), 2**31 - 1)


def round_int64(x) -> np.ndarray:
    """Round half to even, then saturate to [-2^63, 2^63 - 1]; returns int64.  Integer inputs
    are only saturated.  ±inf saturate; NaN raises ValueError (no integer denotes it)."""
    return _round_int(x, -(2**63), 2**63 - 1)


_ELEMENT_ROUND = {"E4M3": round_e4m3, "E5M2": round_e5m2, "E2M1": round_e2m1}


def mx_block_round(x, element: str = "E4M3", channels: int = 32, axis: int = -1) -> np.ndarray:
    """MX block rounding (docs/format.md §12.2, DeepSeek's "Cast to MXFP8" recipe).

    ``axis`` (default: trailing) is cut into groups of ``channels`` consecutive values, every
    other index separately.  Per group ``a = max|x|`` and the UE8M0 scale is
    ``s = 2^ceil(log2(max(a, 1e-4) / M))`` with ``M`` the element format's largest value
    (448 for E4M3, 57344 for E5M2, 6 for E2M1); the ceiling is taken exactly (via ``frexp``).
    Each element becomes ``round_elem(clip(x / s, -M, M))`` and the result is the denoted value
    ``element * s`` (float64).  A NaN in a group makes the whole group NaN.

    Raises ValueError if the axis length is not a multiple of ``channels`` or ``element`` is
    not one of E4M3, E5M2, E2M1.
    """
    if element not in _ELEMENT_ROUND:
        raise ValueError(f"unknown MX element format {element!r}; expected one of "
                         f"{sorted(_ELEMENT_ROUND)}")
    x = np.moveaxis(_as_f64(x), axis, -1)
    n = x.shape[-1] if x.ndim else 1
    if x.ndim == 0 or n % channels:
        raise ValueError(f"MX block rounding: axis length {n} is not a multiple of "
                         f"channels={channels}")
    big = ELEMENT_MAX[element]
    g = x.reshape(*x.shape[:-1], n // channels, channels)
    a = np.max(np.abs(g), axis=-1, keepdims=True)
    y = np.maximum(a, 1e-4) / big
    m, e = np.frexp(y)  # y = m * 2^e; ceil(log2 y) = e - 1 iff y is a power of two (m == 0.5)
    s = np.ldexp(1.0, np.where(m == 0.5, e - 1, e))
    s = np.where(np.isnan(a), a, s)  # a NaN anywhere makes its whole group NaN
    elem = _ELEMENT_ROUND[element](np.clip(g / s, -big, big))
    return np.moveaxis((elem * s).reshape(x.shape), -1, axis)


_ROUND = {
    "FP32": round_fp32,
    "FP16": round_fp16,
    "BF16": round_bf16,
    "E5M2": round_e5m2,
    "E4M3": round_e4m3,
    "E2M1": round_e2m1,
    "UE8M0": round_ue8m0,
    "INT32": round_int32,
    "INT64": round_int64,
}


def round_to(x, encoding: str) -> np.ndarray:
    """Round ``x`` to the named encoding (FP32, FP16, BF16, E5M2, E4M3, E2M1, UE8M0, INT32,
    INT64).  Complex input rounds its real and imaginary parts separately (float encodings
    only).  Raises ValueError for an unknown name."""
    fn = _ROUND.get(encoding)
    if fn is None:
        raise ValueError(f"unknown encoding {encoding!r}; expected one of {sorted(_ROUND)}")
    x = np.asarray(x)
    if np.iscomplexobj(x):
        if encoding.startswith("INT"):
            raise ValueError(f"cannot round complex values to {encoding}")
        out = np.empty(x.shape, dtype=np.complex128)
        out.real = fn(x.real)
        out.imag = fn(x.imag)
        return out
    return fn(x)
