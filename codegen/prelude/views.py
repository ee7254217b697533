"""Affine reads and writes of trailing tensor dims (pasted into generated files when used).

An index map is a tuple of rows ``(strides, shift)``, one per indexed dim ``c_j``, with
``c_j = sum_i strides[i] * d_i + shift`` over a box of positions ``d``. Reads gather through the
map (a view where the strides allow, padding for out-of-range reads); writes scatter through it.
Both return ``(values, live)``: ``live`` is a bool tensor over the box (reads) or the written
dims (writes) that is False where a read fell outside the source or no position was written; the
values there are 0.
"""

import torch
import torch.nn.functional as F


def _positions(rows, sizes, device):
    """c_j for every position of the box `sizes`, as int64 tensors broadcast over the box."""
    grids = [torch.arange(n, device=device).view([n if k == i else 1 for k in range(len(sizes))])
             for i, n in enumerate(sizes)]
    out = []
    for strides, shift in rows:
        c = torch.full([1] * len(sizes), shift, dtype=torch.int64, device=device)
        for s, g in zip(strides, grids):
            if s:
                c = c + s * g
        out.append(c)
    return out


def affine_read(source, rows, sizes, dim=None):
    """Gather ``out[..., d] = source[..., c(d)]`` where the trailing ``len(rows)`` dims of
    `source` are indexed by the map and ``d`` ranges over the box `sizes`; with `dim`, the one
    indexed dim is `dim` and the box takes its place (``[x, c]`` read at ``x - w`` over
    ``(x, w)`` gives ``[x, w, c]``).

    A strided view of the (zero-padded) source; dims read backwards are flipped. Reads outside
    the source give 0 and ``live`` False."""
    if dim is not None:
        after = source.dim() - 1 - dim % source.dim()
        values, live = affine_read(source.movedim(dim, -1), rows, sizes)
        if after:
            values = values.movedim(tuple(range(-len(sizes), 0)),
                                    tuple(range(-len(sizes) - after, -after)))
        return values, live
    p = len(rows)
    extent = source.shape[source.dim() - p:]
    pads, offsets = [], []
    for (strides, shift), n_src in zip(rows, extent):
        lo = shift + sum(min(0, s * (n - 1)) for s, n in zip(strides, sizes))
        hi = shift + sum(max(0, s * (n - 1)) for s, n in zip(strides, sizes))
        if hi < 0 or lo > n_src - 1 or 0 in sizes:  # every read falls outside
            lead = source.shape[:source.dim() - p]
            return (source.new_zeros(*lead, *sizes),
                    torch.zeros(sizes, dtype=torch.bool, device=source.device))
        before, after = max(0, -lo), max(0, hi - (n_src - 1))
        pads.append((before, after))
        offsets.append(shift + before)
    flat_pads = [v for pair in reversed(pads) for v in pair]
    padded = F.pad(source, flat_pads) if any(flat_pads) else source
    stride = padded.stride()
    lead = padded.dim() - p
    offset = padded.storage_offset() + sum(o * stride[lead + j] for j, o in enumerate(offsets))
    out_strides, flips = [], []
    for i, n in enumerate(sizes):
        st = sum(strides[i] * stride[lead + j] for j, (strides, _) in enumerate(rows))
        if st < 0:
            offset += st * (n - 1)
            st = -st
            flips.append(lead + i)
        out_strides.append(st)
    values = padded.as_strided((*padded.shape[:lead], *sizes),
                               (*stride[:lead], *out_strides), offset)
    if flips:
        values = values.flip(flips)
    live = torch.ones(sizes, dtype=torch.bool, device=source.device)
    for c, n_src in zip(_positions(rows, sizes, source.device), extent):
        live = live & (c >= 0) & (c < n_src)
    return values, live


def affine_write(source, rows, sizes):
    """Scatter ``out[..., c(d)] = source[..., d]`` where ``d`` ranges over the trailing dims of
    `source` the rows' strides name (none for a nullary write), into new trailing dims of
    `sizes`. Unwritten positions give 0 and ``live`` False; writes outside are dropped."""
    r = len(rows[0][0]) if rows else 0
    box = tuple(source.shape[source.dim() - r:])
    targets = _positions(rows, box, source.device)
    ok = torch.ones(box, dtype=torch.bool, device=source.device)
    flat = torch.zeros(box, dtype=torch.int64, device=source.device)
    for c, n in zip(targets, sizes):
        ok = ok & (c >= 0) & (c < n)
        flat = flat * n + c
    ok, flat = ok.expand(box).reshape(-1), flat.expand(box).reshape(-1)
    total = 1
    for n in sizes:
        total *= n
    lead = source.shape[:source.dim() - r]
    written = source.reshape(*lead, -1)[..., ok]
    values = source.new_zeros(*lead, total).index_copy(-1, flat[ok], written)
    live = torch.zeros(total, dtype=torch.bool, device=source.device)
    live[flat[ok]] = True
    return values.reshape(*lead, *sizes), live.reshape(sizes)
