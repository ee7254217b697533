"""Arrays on a data-dependent sparse axis computed at its live pairs only (pasted into generated
files when used).

A top-k selection keeps, at every row (every index of the leading dims), a few live slots of a
sparse axis such as ``k/e``; an array on that axis is only ever read at those slots. A *pairs
array* holds one row per live (row, slot) pair, ``[pairs, *rest]``, the pairs grouped by slot
(slot 0's rows first, each group in row order). ``pairs = (rows, slots, counts)``: the row of
each pair in the flattened leading dims, its slot, and how many pairs each slot has (a list, so
the per-slot loops need no device sync).
"""

import math

import torch


def live_pairs(live, lead):
    """The live positions of a mask ``[*lead, n]`` (broadcast to ``lead``) as pairs grouped by
    slot."""
    n = live.shape[-1]
    flat = live.expand(*lead, n).reshape(-1, n)
    slots, rows = flat.t().nonzero(as_tuple=True)
    counts = torch.bincount(slots, minlength=n).tolist()
    return rows, slots, counts


def every_pair(lead, n, device=None):
    """Every (row, slot) pair of ``[*lead, n]``, grouped by slot."""
    count = math.prod(lead)
    rows = torch.arange(count, device=device).repeat(n)
    slots = torch.arange(n, device=device).repeat_interleave(count)
    return rows, slots, [count] * n


def take_rows(x, rank, lead, pairs):
    """``x`` (trailing ``rank`` dims, broadcast to ``lead``) at the row of every pair:
    ``[pairs, *trailing]``."""
    tail = x.shape[x.dim() - rank:]
    return x.expand(*lead, *tail).reshape(-1, *tail).index_select(0, pairs[0])


def take_pairs(x, rank, lead, pairs):
    """``x`` (trailing ``rank`` dims, the sparse axis first, broadcast to ``lead``) at every
    pair: ``[pairs, *trailing[1:]]``."""
    rows, slots, _ = pairs
    tail = x.shape[x.dim() - rank:]
    flat = x.expand(*lead, *tail).reshape(-1, *tail[1:])
    return flat.index_select(0, rows * tail[0] + slots)


def pairwise_matmul(x, weight, dim, pairs):
    """``x[p] @ weight.select(dim, slot of p)`` at every pair ``p``: one matrix product per
    slot that has pairs. ``x`` is ``[pairs, *inner]``; ``weight`` holds the inner dims first,
    then the output dims, the sparse axis at ``dim`` among them."""
    inner = x.shape[1:]
    out_shape = weight.select(dim, 0).shape[len(inner):]
    rows = x.reshape(x.shape[0], math.prod(inner))
    parts = []
    for slot, group in enumerate(rows.split(pairs[2])):
        if group.shape[0]:
            w = weight.select(dim, slot)
            parts.append(group @ w.reshape(rows.shape[1], -1))
    out = torch.cat(parts) if parts else rows.new_zeros(0, math.prod(out_shape))
    return out.reshape(x.shape[0], *out_shape)


def add_rows(values, lead, pairs):
    """The sum of the pairs array ``values`` over the pairs of each row: ``[*lead, *rest]``
    (0 at a row without pairs)."""
    rest = values.shape[1:]
    out = values.new_zeros(math.prod(lead), *rest).index_add(0, pairs[0], values)
    return out.reshape(*lead, *rest)


def pairs_to_dense(values, lead, n, pairs):
    """The pairs array ``values`` laid out densely, ``[*lead, n, *rest]`` (0 at other slots)."""
    rows, slots, _ = pairs
    rest = values.shape[1:]
    out = values.new_zeros(math.prod(lead) * n, *rest).index_copy(0, rows * n + slots, values)
    return out.reshape(*lead, n, *rest)
