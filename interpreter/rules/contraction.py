"""``Einops`` (docs/format.md §11.1): ``out = sum over every group of prod_k in_k``.

Lowered to one ``numpy.einsum`` in sublist form with an Ellipsis for the lead (batch + degree)
dimensions. Liveness is the same contraction over the bool masks (product = AND, sum = OR): the
result is dead iff, for every group index, some operand is dead — a product propagates dead,
a fold skips dead terms and is dead only if all are. Naturals stay exact int64.

Dead terms are skipped by selection, not by multiplying with their stored 0 (docs/format.md §16
item 3): when the result is not finite, the contraction is redone after every other operand's
dead positions are selected out of each non-finite operand (for each operand whose groups are a subset of its own), so an
unrouted expert's inf/NaN never reaches the sum through a dead gate. The contraction itself
is ``_contract`` over :func:`subscripts`, which the rule and the kernel both call.
"""
from __future__ import annotations

import numpy as np

from ncdc.ir.operators import Einops

from ..registry import kernel, rule
from ..values import as_kind, finished


def subscripts(b) -> list | str:
    """The einsum sublist of each input (an Ellipsis for the lead dims, then one label per
    signature group), or what is wrong with the site's signature."""
    sig = b.operator.signature
    if len(sig) != len(b.input_weaves):
        return f"signature has {len(sig)} entries for {len(b.input_weaves)} inputs"
    labels: dict[int, int] = {}
    subs = []
    for k, groups in enumerate(sig):
        nt = len(b.input_weaves[k].target)
        if len(groups) != nt:
            return (f"signature entry {k} names {len(groups)} positions but input {k} has {nt} "
                    "target axes")
        subs.append([Ellipsis] + [labels.setdefault(g, len(labels)) for g in groups])
    if len(labels) > 52:
        return "more than 52 contraction groups"
    return subs


def _contract(arrays, subs):
    operands = []
    for x, sub in zip(arrays, subs, strict=False):
        operands += [x, sub]
    return np.einsum(*operands, [Ellipsis])


@rule(Einops)
def einops(b, inputs, ctx):
    if len(b.operator.signature) != len(inputs):
        raise ctx.error(f"signature has {len(b.operator.signature)} entries for {len(inputs)} "
                        "inputs")
    subs = subscripts(b)
    if isinstance(subs, str):
        raise ctx.error(subs)
    operands, masks = [], []
    for v, sub in zip(inputs, subs, strict=False):
        operands += [v.values, sub]
        if v.live is not None:
            masks += [v.live, sub]
    out = _contract([v.values for v in inputs], subs)
    if masks and out.dtype.kind in "fc" and not np.isfinite(out).all():
        # a non-finite result may come from 0 * inf in a dead term: recompute with the dead
        # terms selected out (the rare path; the check costs one pass over the result)
        _select_out_dead_terms(operands, masks)
        out = np.einsum(*operands, [Ellipsis])
    live = np.einsum(*masks, [Ellipsis]) if masks else None
    return [finished(as_kind(np.asarray(out), b.output_weaves[0].datatype), live)]


def _select_out_dead_terms(operands: list, masks: list) -> None:
    """Zero, by selection, the positions of each non-finite operand where another operand
    (whose groups it covers) is dead, so ``0 * inf`` never enters the fold."""
    if not masks:
        return
    for k in range(0, len(operands), 2):
        v, sub = operands[k], operands[k + 1]
        if v.dtype.kind not in "fc" or np.isfinite(v).all():
            continue
        groups = sub[1:]
        if len(set(groups)) != len(groups):
            continue
        for j in range(0, len(masks), 2):
            m, msub = masks[j], masks[j + 1]
            if m is None or m.shape == ():
                continue
            mg = msub[1:]
            if len(set(mg)) != len(mg) or not set(mg) <= set(groups):
                continue
            lead = m.ndim - len(mg)
            order = [mg.index(g) for g in groups if g in mg]
            aligned = np.transpose(m, list(range(lead)) + [lead + i for i in order])
            shape = list(aligned.shape[:lead])
            it = iter(aligned.shape[lead:])
            shape += [next(it) if g in mg else 1 for g in groups]
            aligned = aligned.reshape(shape)
            v = np.where(aligned, v, 0)
        operands[k] = v


@kernel(Einops)
def einops_kernel(b, ctx):
    subs = subscripts(b)
    if isinstance(subs, str):
        return None                     # the rule raises the error
    dt = b.output_weaves[0].datatype

    def run(xs, params):
        return [as_kind(np.asarray(_contract(xs, subs)), dt)]

    return run
