"""Rounding to pyncd's storage formats for torch tensors (emulation mode, docs/format.md §12).

Float formats return the denoted value in a floating input's dtype (float64 for integer
inputs), computed internally in float64; integer formats return int64.  Saturating: E4M3, E5M2, E2M1 (|x| above
the largest value, inf included, gives ±max); IEEE overflow to inf: FP32, FP16, BF16.  NaN
stays NaN.  Bit-for-bit equal to ncdc's numpy interpreter (interpreter/quant.py).
"""

import math

import torch


def _out(r, x):
    """Cast the float64 result back to a floating input's dtype (integer inputs: float64)."""
    return r.to(x.dtype) if x.is_floating_point() else r


def _round_minifloat(x, mant_bits, min_exp, max_val, saturate):
    """RNE to a binary float with `mant_bits` mantissa bits, smallest normal exponent
    `min_exp` and largest value `max_val`; exact in float64 via frexp/ldexp.  Overflow
    saturates to ±max_val if `saturate`, else gives ±inf.  Returns float64."""
    x = x.to(torch.float64)
    cap = max_val if saturate else 2.0 * max_val
    a = torch.clamp(x.abs(), max=cap)
    _, e = torch.frexp(a)  # a = m * 2^e, m in [0.5, 1)
    q = (torch.clamp(e.to(torch.int64) - 1, min=min_exp) - mant_bits).to(torch.float64)
    r = torch.round(a * torch.exp2(-q)) * torch.exp2(q)  # torch.round: ties to even
    if not saturate:
        r = torch.where(r > max_val, torch.full_like(r, math.inf), r)
    return torch.copysign(r, x)


def round_fp32(x):
    """Round to IEEE binary32 (RNE); overflow → ±inf, NaN stays NaN."""
    return _out(x.to(torch.float32).to(torch.float64), x)


def round_fp16(x):
    """Round directly to IEEE binary16 (10 mantissa bits, subnormals to 2^-24, RNE); values
    rounding past 65504 give ±inf, NaN stays NaN."""
    return _out(_round_minifloat(x, 10, -14, 65504.0, saturate=False), x)


def round_bf16(x):
    """Round to float32, then round-to-nearest-even to bfloat16 (upper 16 bits of the binary32
    pattern); overflow past the bfloat16 maximum gives ±inf, NaN stays NaN."""
    return _out(x.to(torch.float32).to(torch.bfloat16).to(torch.float64), x)


def round_e4m3(x):
    """Round to OCP E4M3FN (bias 7, 3 mantissa bits, subnormals to 2^-9), RNE.  Saturating:
    |x| > 448 (inf included) gives ±448, unlike torch's eager float8_e4m3fn cast; NaN stays NaN."""
    return _out(_round_minifloat(x, 3, -6, 448.0, saturate=True), x)


def round_e5m2(x):
    """Round to OCP E5M2 (bias 15, 2 mantissa bits, subnormals to 2^-16), RNE.  Saturating:
    |x| > 57344 (inf included) gives ±57344; NaN stays NaN."""
    return _out(_round_minifloat(x, 2, -14, 57344.0, saturate=True), x)


def round_e2m1(x):
    """Round to OCP E2M1 (magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6), RNE.  Saturating: |x| > 6
    (inf included) gives ±6; NaN stays NaN."""
    return _out(_round_minifloat(x, 1, 0, 6.0, saturate=True), x)


def round_ue8m0(x):
    """Round a positive scale to a power of two 2^e, e in [-127, 127]: nearest in the log
    domain, ties up (x = m * 2^e with m in [0.5, 1) gives 2^e if m >= 2^-1/2, else 2^(e-1)).
    0 gives 2^-127, +inf gives 2^127; negative inputs and NaN give NaN."""
    x64 = x.to(torch.float64)
    a = torch.clamp(x64, min=0.0, max=2.0**128)
    m, e = torch.frexp(a)
    e = e.to(torch.int64)
    e = torch.where(m >= math.sqrt(0.5), e, e - 1)
    e = torch.where(a == 0, torch.full_like(e, -127), torch.clamp(e, -127, 127))
    r = torch.exp2(e.to(torch.float64))
    r = torch.where((x64 < 0) | torch.isnan(x64), torch.full_like(r, math.nan), r)
    return _out(r, x)


def _round_int(x, lo, hi):
    if not (x.is_floating_point() or x.is_complex()):
        return torch.clamp(x.to(torch.int64), lo, hi)
    x = x.to(torch.float64)
    if torch.isnan(x).any():
        raise ValueError("cannot round NaN to an integer format")
    r = torch.round(x)
    over = r >= float(hi) + 1.0
    under = r <= float(lo)
    mid = torch.where(over | under, torch.zeros_like(r), r).to(torch.int64)
    mid = torch.where(over, torch.full_like(mid, hi), mid)
    return torch.where(under, torch.full_like(mid, lo), mid)


def round_int32(x):
    """Round half to even, saturate to [-2^31, 2^31 - 1]; returns int64.  NaN raises."""
    return _round_int(x, -(2**31), 2**31 - 1)


def round_int64(x):
    """Round half to even, saturate to [-2^63, 2^63 - 1]; returns int64.  NaN raises."""
    return _round_int(x, -(2**63), 2**63 - 1)


def _element_round(element):
    table = {"E4M3": (round_e4m3, 448.0), "E5M2": (round_e5m2, 57344.0),
             "E2M1": (round_e2m1, 6.0)}
    if element not in table:
        raise ValueError(f"unknown MX element format {element!r}; expected one of "
                         f"{sorted(table)}")
    return table[element]


def mx_block_round(x, element="E4M3", channels=32, axis=-1):
    """MX block rounding: cut `axis` into groups of `channels` values; per group a = max|x|,
    s = 2^ceil(log2(max(a, 1e-4) / M)) with M the element maximum (448 for E4M3, 6 for E2M1);
    result = round_elem(clamp(x / s, -M, M)) * s.  Raises ValueError if the axis length is
    not a multiple of `channels`."""
    rnd, big = _element_round(element)
    g = torch.movedim(x.to(torch.float64), axis, -1)
    n = g.shape[-1] if g.dim() else 1
    if g.dim() == 0 or n % channels:
        raise ValueError(f"MX block rounding: axis length {n} is not a multiple of "
                         f"channels={channels}")
    shape = g.shape
    g = g.reshape(*shape[:-1], n // channels, channels)
    a = torch.amax(g.abs(), dim=-1, keepdim=True)
    m, e = torch.frexp(torch.clamp(a, min=1e-4) / big)
    e = torch.where(m == 0.5, e - 1, e)  # exact ceil(log2(.))
    s = torch.exp2(e.to(torch.float64))
    s = torch.where(torch.isnan(a), a, s)  # a NaN anywhere makes its whole group NaN
    elem = rnd(torch.clamp(g / s, -big, big))
    r = torch.movedim((elem * s).reshape(shape), -1, axis)
    return _out(r, x)


def round_to(x, encoding):
    """Round `x` to the named encoding (FP32, FP16, BF16, E5M2, E4M3, E2M1, UE8M0, INT32,
    INT64); complex tensors round real and imaginary parts separately."""
    table = {"FP32": round_fp32, "FP16": round_fp16, "BF16": round_bf16,
             "E5M2": round_e5m2, "E4M3": round_e4m3, "E2M1": round_e2m1,
             "UE8M0": round_ue8m0, "INT32": round_int32, "INT64": round_int64}
    if encoding not in table:
        raise ValueError(f"unknown encoding {encoding!r}; expected one of {sorted(table)}")
    fn = table[encoding]
    if x.is_complex():
        if encoding.startswith("INT"):
            raise ValueError(f"cannot round complex values to {encoding}")
        return torch.complex(fn(x.real), fn(x.imag))
    return fn(x)


def held(x, encoding, emulate=True, channels=None):
    """`x` as held in storage `encoding` when `emulate` is true (MX block rounding over groups
    of `channels` along the last axis when `channels` is given), else `x` itself unchanged."""
    if not emulate:
        return x
    if channels is not None:
        return mx_block_round(x, encoding, channels)
    return round_to(x, encoding)
