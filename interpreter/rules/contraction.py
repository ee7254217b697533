"""``Einops`` (FORMAT.md §11.1): ``out = sum over every group of prod_k in_k``.

Lowered to one ``numpy.einsum`` in sublist form with an Ellipsis for the lead (batch + degree)
dimensions. Liveness is the same contraction over the bool masks (product = AND, sum = OR): the
result is dead iff, for every group index, some operand is dead — a product propagates dead,
a fold skips dead terms and is dead only if all are. Naturals stay exact int64.
"""
from __future__ import annotations

import numpy as np

from ir.operators import Einops

from ..registry import rule
from ..values import as_kind, finished


@rule(Einops)
def einops(b, inputs, ctx):
    sig = b.operator.signature
    if len(sig) != len(inputs):
        raise ctx.error(f"signature has {len(sig)} entries for {len(inputs)} inputs")
    labels: dict[int, int] = {}
    operands, masks = [], []
    for k, (v, groups) in enumerate(zip(inputs, sig)):
        nt = len(b.input_weaves[k].target)
        if len(groups) != nt:
            raise ctx.error(f"signature entry {k} names {len(groups)} positions but input {k} "
                            f"has {nt} target axes")
        sub = [Ellipsis] + [labels.setdefault(g, len(labels)) for g in groups]
        operands += [v.values, sub]
        if v.live is not None:
            masks += [v.live, sub]
    if len(labels) > 52:
        raise ctx.error("more than 52 contraction groups")
    out = np.einsum(*operands, [Ellipsis])
    live = np.einsum(*masks, [Ellipsis]) if masks else None
    return [finished(as_kind(np.asarray(out), b.output_weaves[0].datatype), live)]
