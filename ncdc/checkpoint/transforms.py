"""The tensor transforms of a checkpoint map, on torch tensors: block-scaled dequantization
(FP8 values or packed FP4 codes), split, multiplication by another tensor, permute, dtype and
the final reshape."""
from __future__ import annotations

import math

from .errors import CheckpointError

TORCH_DTYPES = {"float64": "float64", "float32": "float32", "bfloat16": "bfloat16",
                "float16": "float16"}


def scale_shape(shape, block) -> tuple[int, ...]:
    """The shape of the block scales of a tensor: ``ceil(n / b)`` per axis."""
    return tuple(math.ceil(n / b) for n, b in zip(shape, block, strict=False))


E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
"""The value of each 4-bit E2M1 code (sign bit, two exponent bits, one mantissa bit)."""
CHUNK = 1 << 18
"""Elements of the weight dequantized at a time (whole block rows): the float64 temporaries
of a dequantization stay a few MiB, whatever the tensor's size."""


def unpacked_shape(shape, codes: str) -> tuple[int, ...]:
    """The shape of a weight's values: ``shape`` itself, or for ``e2m1`` codes packed two to
    a byte the last axis doubled."""
    shape = tuple(shape)
    return shape if codes != "e2m1" else shape[:-1] + (2 * shape[-1],)


def scale_values(scale):
    """A scale tensor as float64 multipliers; ``uint8`` bytes are E8M0 exponents
    (``2 ** (b - 127)``, 255 is NaN), as ``float8_e8m0fnu`` holds them."""
    import torch

    if scale.dtype == torch.uint8:
        s = torch.exp2(scale.to(torch.float64) - 127.0)
        return torch.where(scale == 255, torch.nan, s)
    return scale.to(torch.float64)


def e2m1_values(packed):
    """FP4 E2M1 codes packed two to a byte (``int8``, ``uint8`` or ``float4_e2m1fn_x2``;
    element ``2i`` in the low nibble of byte ``i``, ``2i + 1`` in the high one) as float64,
    the last axis twice as long."""
    import torch

    lut = torch.tensor(E2M1, dtype=torch.float64)
    u8 = packed.contiguous().view(torch.uint8)
    pair = torch.stack((lut[(u8 & 0xF).long()], lut[(u8 >> 4).long()]), dim=-1)
    return pair.reshape(unpacked_shape(packed.shape, "e2m1"))


def dequantize(w, scale, block, dtype, what: str, codes: str = "values"):
    """``w * scale`` with each scale covering a ``block`` of ``w``'s values (DeepSeek-V3's
    ``weight_scale_inv``: float32 multipliers per 128x128 block; DeepSeek-V4's FP4 experts:
    E2M1 codes packed two to a byte with one E8M0 scale per 32 values along the last axis), the
    last block of an axis partial. Computed exactly in float64 and returned in ``dtype``, a few
    block rows at a time (:data:`CHUNK`), so the float64 temporaries stay small."""
    import torch

    if codes == "e2m1" and w.dim() == 0:
        raise CheckpointError(f"{what}: packed FP4 codes need at least one axis")
    if codes == "e2m1" and w.dtype not in (torch.int8, torch.uint8) and \
            w.dtype != getattr(torch, "float4_e2m1fn_x2", None):
        raise CheckpointError(f"{what}: packed FP4 codes are int8, uint8 or float4_e2m1fn_x2 "
                              f"bytes, not {str(w.dtype).removeprefix('torch.')}")
    shape = unpacked_shape(w.shape, codes)
    if len(block) != len(shape):
        raise CheckpointError(f"{what}: a {len(shape)}-axis weight needs a {len(shape)}-axis "
                              f"scale block; the map gives {list(block)}")
    want = scale_shape(shape, block)
    if tuple(scale.shape) != want:
        raise CheckpointError(f"{what}: scale shape {tuple(scale.shape)}, expected {want} for "
                              f"weight shape {shape} in blocks of {list(block)}")
    s = scale_values(scale)
    if w.dim() == 0:
        return (w.to(torch.float64) * s).to(dtype)
    out = torch.empty(shape, dtype=dtype)
    block = [min(b, max(n, 1)) for b, n in zip(block, shape, strict=False)]  # same blocks, no huge repeat
    row = math.prod(shape[1:])
    step = block[0] * max(1, CHUNK // max(1, row * block[0]))
    for r0 in range(0, shape[0], step):
        rows = slice(r0, r0 + step)
        part = e2m1_values(w[rows]) if codes == "e2m1" else w[rows].to(torch.float64)
        f = s[r0 // block[0]:math.ceil((r0 + part.shape[0]) / block[0])]
        for ax in range(w.dim()):
            f = f.repeat_interleave(block[ax], dim=ax).narrow(ax, 0, part.shape[ax])
        out[rows] = (part * f).to(dtype)
    return out


def multiply(t, factor, index, dtype, what: str):
    """``t`` times ``factor`` (``factor[index]`` along its first axis when ``index`` is
    given), broadcast against ``t``'s shape; computed in float64 and returned in ``dtype``."""
    import torch

    f = factor.to(torch.float64) if factor.dtype == torch.uint8 or factor.is_floating_point() \
        else None
    if f is None:
        raise CheckpointError(f"{what}: the factor tensor holds {factor.dtype}, not numbers to "
                              "multiply by")
    if index is not None:
        if f.dim() == 0 or not 0 <= index < f.shape[0]:
            raise CheckpointError(f"{what}: index {index} of a factor with shape "
                                  f"{tuple(f.shape)}")
        f = f[index]
    try:
        fits = torch.broadcast_shapes(f.shape, t.shape) == t.shape
    except RuntimeError:
        fits = False
    if not fits:
        raise CheckpointError(f"{what}: a factor of shape {tuple(f.shape)} does not broadcast "
                              f"to the tensor's shape {tuple(t.shape)}")
    return (t.to(torch.float64) * f).to(dtype)


def split(t, axis: int, sizes, n: int, what: str):
    """``t`` cut along ``axis`` into ``n`` parts (``sizes``, or equal parts)."""
    if not -t.dim() <= axis < t.dim():
        raise CheckpointError(f"{what}: split axis {axis} of a {t.dim()}-axis tensor")
    total = t.shape[axis]
    if sizes is None:
        if total % n:
            raise CheckpointError(f"{what}: axis {axis} of length {total} does not split "
                                  f"into {n} equal parts")
        sizes = [total // n] * n
    if any(s < 0 for s in sizes) or sum(sizes) != total:
        raise CheckpointError(f"{what}: split sizes {list(sizes)} sum to {sum(sizes)}, axis "
                              f"{axis} has {total}")
    return t.split(list(sizes), dim=axis)


def permute(t, perm, what: str):
    if len(perm) != t.dim():
        raise CheckpointError(f"{what}: permute {list(perm)} of a tensor with shape "
                              f"{tuple(t.shape)}")
    return t.permute(*perm)


def cast(t, dtype: str):
    import torch

    return t.to(getattr(torch, TORCH_DTYPES[dtype]))


def _bounds(shape) -> set[int]:
    """The row-major boundaries of a shape: its prefix products."""
    out, p = set(), 1
    for n in shape:
        p *= n
        out.add(p)
    return out


def reshape(t, shape, what: str):
    """``t`` in ``shape`` (row-major) when the two differ only by merged or split axes (the
    boundaries of one shape are boundaries of the other): ``[h*c, q]`` may become ``[h, c,
    q]``, but ``[f, m]`` never ``[m, f]``, which needs a transpose."""
    shape = tuple(shape)
    if tuple(t.shape) == shape:
        return t
    a, b = _bounds(t.shape), _bounds(shape)
    if t.numel() != math.prod(shape) or not (a <= b or b <= a):
        raise CheckpointError(f"{what}: shape {tuple(t.shape)} after the rule's transforms, "
                              f"expected {shape}" + (
                                  f" ({math.prod(shape)} elements, found {t.numel()})"
                                  if t.numel() != math.prod(shape) else
                                  " (the axes differ, not only by merging or splitting)"))
    return t.reshape(shape)


__all__ = ["E2M1", "cast", "dequantize", "e2m1_values", "multiply", "permute", "reshape",
           "scale_shape", "scale_values", "split", "unpacked_shape"]
