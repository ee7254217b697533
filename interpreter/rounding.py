"""The quantisation policy of emulate mode (docs/format.md §12). See ``QUANT_POLICY.md`` beside this
file for the full statement the torch code generator mirrors.

exact mode: nothing is ever rounded; every ``TypeConvert`` is the identity.

emulate mode, applied by the evaluator to each output of each ``Broadcasted`` once it lies in
its output weave's layout (batch dimensions of enclosing lifted blocks first):

1. ``TypeConvert``: round to its ``target`` field.
2. Any other operator whose output weave datatype is a ``Quantified`` real, or a ``Complex``
   over one: round to that format. Bare ``R`` is never rounded; naturals are exact integers and
   are only ever rounded by an explicit ``TypeConvert`` (INT32 saturates).
3. Exempt (they move values, they do not compute them): ``View``, ``CovariantView``,
   ``ConcatenateAxes``, ``DeconcatenateAxes``, ``Identity``, ``Cast``, and the boxes
   ``BlockOperator`` / ``ParaBlockOperator`` (their bodies round for themselves).

A block-scaled target (MXFP8) groups ``scale.channels`` consecutive values along the **last
axis of the array as it lies on the wire** (for an all-TILED weave over degree ``(x, m)`` that
is ``m``; inside a block lifted over tokens it is still the block array's last axis), every other
index separately — :func:`interpreter.quant.mx_block_round`. Complex values round both parts.
Accumulation inside an operator is float64 (no emulated FP32 accumulators).
"""
from __future__ import annotations

import numpy as np

from ncdc.ir.datatypes import storage_encoding
from ncdc.ir.storage import block_scale as _scale
from ncdc.ir.storage import output_format

from .quant import mx_block_round, round_to

__all__ = ["has_block_scale", "output_format", "round_values"]


def has_block_scale(dt) -> bool:
    return _scale(dt) is not None


def round_values(values: np.ndarray, dt, trailing, env) -> np.ndarray:
    """``values`` rounded to the storage format of ``dt``; ``trailing()`` gives the logical
    length of the last axis (block scales group along it)."""
    enc = storage_encoding(dt).value
    scale = _scale(dt)
    if scale is None:
        return round_to(values, enc)
    channels = env.size(scale.channels)
    if values.ndim == 0:
        raise ValueError("a block-scaled format needs an axis to group along")
    n = trailing() if callable(trailing) else trailing
    if values.shape[-1] != n:
        values = np.broadcast_to(values, values.shape[:-1] + (n,))
    if np.iscomplexobj(values):
        out = np.empty(values.shape, dtype=np.complex128)
        out.real = mx_block_round(values.real, enc, channels, axis=-1)
        out.imag = mx_block_round(values.imag, enc, channels, axis=-1)
        return out
    return mx_block_round(values, enc, channels, axis=-1)
