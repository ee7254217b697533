"""``Embedding`` (docs/format.md §11.3): ``out[o...] = T[idx, o...]`` for a rank-0 natural index.
A dead index gives a dead row; an index outside ``[0, N)`` is an
:class:`~ir.errors.EvaluationError` naming the table's key, the index and ``N``."""
from __future__ import annotations

import numpy as np

from ncdc.ir.operators import Embedding

from ..registry import rule
from ..values import as_kind, finished


@rule(Embedding)
def embedding(b, inputs, ctx):
    T = ctx.param("table")
    key = ctx.param_keys.get("table", "table")
    (v,) = inputs
    if b.input_weaves[0].target:
        raise ctx.error("an Embedding index must be rank 0 (every index axis is degree)")
    idx = as_kind(v.values, b.input_weaves[0].datatype)
    if v.live is not None:
        idx = np.where(v.live, idx, 0)
    n = T.shape[0]
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        first = int(idx[bad].flat[0])
        raise ctx.error(f"index {first} is outside the table {key!r} of {n} rows "
                        f"({int(bad.sum())} bad index(es))")
    rows = T[idx]
    nout = T.ndim - 1
    live = None if v.live is None else v.live.reshape(v.live.shape + (1,) * nout)
    return [finished(rows, live)]
