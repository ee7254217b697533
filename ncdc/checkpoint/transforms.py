"""The tensor transforms of a checkpoint map, on torch tensors: block-scaled FP8
dequantization, split, permute, dtype and the final reshape."""
from __future__ import annotations

import math

from .errors import CheckpointError

TORCH_DTYPES = {"float64": "float64", "float32": "float32", "bfloat16": "bfloat16",
                "float16": "float16"}


def scale_shape(shape, block) -> tuple[int, ...]:
    """The shape of the block scales of a tensor: ``ceil(n / b)`` per axis."""
    return tuple(math.ceil(n / b) for n, b in zip(shape, block, strict=False))


def dequantize(w, scale, block, dtype, what: str):
    """``w * scale`` with each scale covering a ``block`` of ``w`` (DeepSeek-V3's
    ``weight_scale_inv``: float32 multipliers per 128x128 block, the last block of an axis
    partial), computed in float64 (exact for FP8 codes times a float32 scale) and returned in
    ``dtype``; one block row at a time, so the float64 temporaries stay small."""
    import torch

    if len(block) != w.dim():
        raise CheckpointError(f"{what}: a {w.dim()}-axis weight needs a {w.dim()}-axis scale "
                              f"block; the map gives {list(block)}")
    want = scale_shape(tuple(w.shape), block)
    if tuple(scale.shape) != want:
        raise CheckpointError(f"{what}: scale shape {tuple(scale.shape)}, expected {want} for "
                              f"weight shape {tuple(w.shape)} in blocks of {list(block)}")
    out = torch.empty(w.shape, dtype=dtype)
    s = scale.to(torch.float64)
    if w.dim() == 0:
        return (w.to(torch.float64) * s).to(dtype)
    block = [min(b, max(n, 1)) for b, n in zip(block, w.shape, strict=False)]  # same blocks, no huge repeat
    b0 = block[0]
    for r in range(want[0]):
        rows = slice(r * b0, (r + 1) * b0)
        part = w[rows].to(torch.float64)
        f = s[r]
        for ax in range(1, w.dim()):
            f = f.repeat_interleave(block[ax], dim=ax - 1).narrow(ax - 1, 0, w.shape[ax])
        out[rows] = (part * f).to(dtype)
    return out


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


__all__ = ["cast", "dequantize", "permute", "reshape", "scale_shape", "split"]
