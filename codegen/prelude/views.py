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
    return [sum((s * g for s, g in zip(strides, grids) if s),
                torch.full([1] * len(sizes), shift, dtype=torch.int64, device=device))
            for strides, shift in rows]


def affine_read(source, rows, sizes, dim=None, flip=True):
    """Gather ``out[..., d] = source[..., c(d)]`` where the trailing ``len(rows)`` dims of
    `source` are indexed by the map and ``d`` ranges over the box `sizes`; with `dim`, the one
    indexed dim is `dim` and the box takes its place (``[x, c]`` read at ``x - w`` over
    ``(x, w)`` gives ``[x, w, c]``).

    A view of the (zero-padded) source built with ``narrow``, ``unfold`` and strided slices
    where every box dim moves along one source dim, and a gather where a box dim moves along
    two source dims (a diagonal). A box dim read backwards (a negative stride) is flipped, a
    copy; with ``flip=False`` it comes back in reverse order instead (index ``n - 1 - d``,
    values and ``live`` alike), so the read stays a view. Reads outside the source give 0 and
    ``live`` False."""
    if dim is not None:
        after = source.dim() - 1 - dim % source.dim()
        values, live = affine_read(source.movedim(dim, -1), rows, sizes, flip=flip)
        if after:
            values = values.movedim(tuple(range(-len(sizes), 0)),
                                    tuple(range(-len(sizes) - after, -after)))
        return values, live
    p, r = len(rows), len(sizes)
    lead = source.dim() - p
    extent = source.shape[lead:]
    pads, offsets = [], []
    for (strides, shift), n_src in zip(rows, extent):
        lo = shift + sum(min(0, s * (n - 1)) for s, n in zip(strides, sizes))
        hi = shift + sum(max(0, s * (n - 1)) for s, n in zip(strides, sizes))
        if hi < 0 or lo > n_src - 1 or 0 in sizes:  # every read falls outside
            return (source.new_zeros(*source.shape[:lead], *sizes),
                    torch.zeros(sizes, dtype=torch.bool, device=source.device))
        before, after = max(0, -lo), max(0, hi - (n_src - 1))
        pads.append((before, after))
        offsets.append(shift + before)
    flat_pads = [v for pair in reversed(pads) for v in pair]
    padded = F.pad(source, flat_pads) if any(flat_pads) else source
    live = torch.ones(sizes, dtype=torch.bool, device=source.device)
    for c, n_src in zip(_positions(rows, sizes, source.device) if any(flat_pads) else (), extent):
        live = live & (c >= 0) & (c < n_src)  # (no padding: every read falls inside)
    moving = [[j for j, (strides, _) in enumerate(rows) if strides[i]] for i in range(r)]
    if any(len(js) > 1 for js in moving):  # a diagonal across source dims: gather
        index = [c - lo for c, lo in zip(_positions(rows, sizes, source.device),
                                         (-b for b, _ in pads))]
        return padded[(Ellipsis, *index)], live
    backwards = [i for i in range(r) if any(strides[i] < 0 for strides, _ in rows)]
    if backwards and not flip:
        live = live.flip(backwards)
    values, order, flips = padded, [], []
    for (strides, _), offset in zip(rows, offsets):
        if lead != values.dim() - 1:  # no no-op views: inductor would copy the windows
            values = values.movedim(lead, -1)
        box = sorted((i for i in range(r) if strides[i]), key=lambda i: -abs(strides[i]))
        for i in box:
            if strides[i] < 0:
                offset += strides[i] * (sizes[i] - 1)
                flips.append(i)
        span = 1 + sum(abs(strides[i]) * (sizes[i] - 1) for i in box)
        values = values.narrow(-1, offset, span)
        for k, i in enumerate(box):
            rest = 1 + sum(abs(strides[q]) * (sizes[q] - 1) for q in box[k + 1:])
            if k + 1 < len(box):
                values = values.unfold(-1, rest, abs(strides[i]))
            elif abs(strides[i]) > 1:
                values = values[..., ::abs(strides[i])]
        if not box:
            values = values.squeeze(-1)
        order += box
    fixed = [i for i in range(r) if not moving[i]]
    if fixed:
        values = values[(..., *[None] * len(fixed))].expand(
            *values.shape, *[sizes[i] for i in fixed])
    order += fixed
    values = values.permute(*range(lead), *(lead + order.index(i) for i in range(r)))
    if flips and flip:
        values = values.flip([lead + i for i in flips])
    return values, live


def affine_write(source, rows, sizes):
    """Scatter ``out[..., c(d)] = source[..., d]`` where ``d`` ranges over the trailing dims of
    `source` the rows' strides name (none for a nullary write), into new trailing dims of
    `sizes`. Unwritten positions give 0 and ``live`` False; writes outside are dropped (sent to
    a spare slot, so every shape is static)."""
    r = len(rows[0][0]) if rows else 0
    box = tuple(source.shape[source.dim() - r:])
    targets = _positions(rows, box, source.device)
    ok = torch.ones(box, dtype=torch.bool, device=source.device)
    flat = torch.zeros(box, dtype=torch.int64, device=source.device)
    for c, n in zip(targets, sizes):
        ok = ok & (c >= 0) & (c < n)
        flat = flat * n + c
    total = 1
    for n in sizes:
        total *= n
    index = torch.where(ok, flat, total).expand(box).reshape(-1)  # writes outside: a spare slot
    lead = source.shape[:source.dim() - r]
    values = source.new_zeros(*lead, total + 1).index_copy(-1, index, source.reshape(*lead, -1))
    live = torch.zeros(total + 1, dtype=torch.bool, device=source.device).index_fill(0, index, True)
    return values[..., :total].reshape(*lead, *sizes), live[:total].reshape(sizes)
