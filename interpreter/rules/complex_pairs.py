"""``PairsAsComplex`` / ``Decomplex`` (docs/format.md §11.20) on the one target axis:
``p[t] = v[2t] + i v[2t+1]``; ``y[2t] = Re p[t]``, ``y[2t+1] = Im p[t]``. A complex number is
dead iff either element of its pair is; both elements of a dead number are dead."""
from __future__ import annotations

import numpy as np

from ncdc.ir.operators import Decomplex, PairsAsComplex

from ..registry import rule
from ..values import finished, land


@rule(PairsAsComplex)
def pairs_as_complex(b, inputs, ctx):
    (v,) = inputs
    x = v.values
    if x.shape[-1] % 2:
        raise ctx.error(f"an odd number of channels ({x.shape[-1]}) cannot form pairs")
    p = x[..., 0::2] + 1j * x[..., 1::2]
    live = v.live
    if live is not None and live.shape[-1] != 1:
        live = land(live[..., 0::2], live[..., 1::2])
    return [finished(p.astype(np.complex128), live)]


@rule(Decomplex)
def decomplex(b, inputs, ctx):
    (v,) = inputs
    p = v.values
    y = np.stack([p.real, p.imag], axis=-1).reshape(p.shape[:-1] + (2 * p.shape[-1],))
    live = v.live
    if live is not None and live.shape[-1] != 1:
        live = np.repeat(live, 2, axis=-1)
    return [finished(np.ascontiguousarray(y, dtype=np.float64), live)]
