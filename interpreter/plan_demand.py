"""Demand on sparse axes: a plan computes only the positions of a sparse axis that are read.

The pattern (the routed experts of a mixture): a ``ProductOfMorphisms`` whose parts yield a
gate ``g`` over a :class:`~ir.axes.SparseAxis` ``A`` (``k/e``: ``k`` of ``e`` positions live,
chosen by data) and an array ``Y[A, ...]``, followed by an ``Einops`` that multiplies the two
and sums over ``A``. The Einops skips dead terms (docs/format.md §2.4, §16 item 3), so ``Y`` is read
only where ``g`` is live. When the part that computes ``Y`` is *position-wise in A* (no
operator reads across ``A``: every reindexing is a ``Rearrangement``, no operator has ``A`` in
an input target, no tape), each of its bank ``Linear`` s — ``W[in, ..., A, ...]`` with ``A``
only in the output target — computes, per position ``a`` of ``A``, only the rows (leading
positions) where ``g`` is live: one BLAS matmul per ``a`` over the routed rows; the other
positions are **dead** (value 0). Liveness carries the demand through the rest of the part
(elementwise rules keep dead positions dead; the fused bank ``Linear`` + diagonal ``View``
multiplies only live rows, :func:`interpreter.fusion.bank_matmul`), and the Einops result is the
one the dense evaluation gives: its dead terms are exactly the ones now not computed.

Applied in ``exact`` mode. An observer sees the part's blocks with the unread positions dead.
Over leading batch dims the plan runs the part and the contraction in row chunks
(``plan._Builder.chunked``), or, in ``exact`` mode where the rows take more than one chunk,
experts first (:mod:`interpreter.plan_experts`: one routed position of ``A`` at a time, over
its rows), so the part's arrays (``[x, e, m]``) are never whole.
"""
from __future__ import annotations

import math

from ncdc.ir.axes import SparseAxis
from ncdc.ir.morphisms import (
    Block,
    Broadcasted,
    Composed,
    ProductOfMorphisms,
    Rearrangement,
)
from ncdc.ir.operators import BlockOperator, Einops, Linear, ParaBlockOperator
from ncdc.ir.walk import by_kind


def gated_contraction(c) -> tuple[int, int, SparseAxis] | None:
    """``(gate input, gated input, A)`` when ``c`` is an Einops ``g[A] * Y[.., A, ..]`` summed
    over ``A`` (each read a ``Rearrangement``), else None."""
    if not (isinstance(c, Broadcasted) and isinstance(c.operator, Einops)):
        return None
    if len(c.input_weaves) != 2:
        return None
    sig = c.operator.signature
    for kg in (0, 1):
        ky = 1 - kg
        wg, wy = c.input_weaves[kg], c.input_weaves[ky]
        if len(wg.shape) != 1 or not isinstance(wg.shape[0], SparseAxis):
            continue
        A = wg.shape[0]
        if list(wy.shape).count(A) != 1 or A not in wy.target:
            continue
        (grp,) = sig[kg]
        if list(sig[ky]).count(grp) != 1 or sig[ky][wy.target.index(A)] != grp:
            continue
        if not all(_rearranging(r) for r in c.reindexings):
            continue
        return kg, ky, A
    return None


def _rearranging(r) -> bool:
    if isinstance(r, Rearrangement):
        return True
    return isinstance(r, ProductOfMorphisms) and all(_rearranging(p) for p in r.content)


def bank_position(b: Broadcasted, A) -> int | None:
    """Where ``A`` lies in the output target of ``b`` when ``b`` is a demand source: a
    one-input ``Linear`` with no degree whose weight's output target holds ``A`` once (and its
    input target not)."""
    if not (isinstance(b.operator, Linear) and len(b.input_weaves) == 1 and not b.degree):
        return None
    if A in b.input_weaves[0].target or len(b.output_weaves) != 1:
        return None
    target = b.output_weaves[0].target
    if list(target).count(A) != 1 or b.output_weaves[0].tiled_count:
        return None
    return target.index(A)


def position_wise(m, A) -> bool:
    """Whether every value ``m`` computes at a position of ``A`` reads only that position of
    ``A`` (see the module docstring); conservative: unknown forms (tape, wraps, truncated
    terms) are not."""
    return by_kind(_POSITION_WISE, m, _never)(m, A)


def _never(m, A) -> bool:
    return False


def _parts_position_wise(m, A) -> bool:
    return all(position_wise(p, A) for p in m.content)


def _broadcast_position_wise(m: Broadcasted, A) -> bool:
    if not all(_rearranging(r) for r in m.reindexings):
        return False
    op = m.operator
    if isinstance(op, ParaBlockOperator):
        return False
    if isinstance(op, BlockOperator):
        return position_wise(op.block, A)
    if any(A in w.target for w in m.input_weaves):
        return False
    if any(A in w.target for w in m.output_weaves):
        return isinstance(op, Linear)             # a bank: A from the weight (or the degree)
    return True


_POSITION_WISE = {
    Rearrangement: lambda m, A: True,
    Composed: _parts_position_wise,
    ProductOfMorphisms: _parts_position_wise,
    Block: lambda m, A: position_wise(m.body, A),
    Broadcasted: _broadcast_position_wise,
}
""":func:`position_wise` of each kind (:func:`ir.walk.by_kind`); any other kind is not."""


def widest_site(m, ev) -> int:
    """The most elements one result of a ``Broadcasted`` in ``m`` holds per lifted position
    (its degree and output target, an axis shared by both counted once: a fused bank keeps the
    diagonal); boxes count their degree. Sizes the chunks of a gated part
    (``plan._Builder.chunked``)."""
    if isinstance(m, (Composed, ProductOfMorphisms)):
        return max((widest_site(p, ev) for p in m.content), default=0)
    if isinstance(m, Block):
        return widest_site(m.body, ev)
    if not isinstance(m, Broadcasted):
        return 0
    deg = math.prod(ev.degree_sizes(m))
    if isinstance(m.operator, (BlockOperator, ParaBlockOperator)):
        return deg * widest_site(m.operator.block, ev)
    most = 0
    for w in m.output_weaves:
        extra = [a for a in w.target if a not in m.degree]
        most = max(most, deg * math.prod(ev.env.sizes(tuple(extra))))
    return most
