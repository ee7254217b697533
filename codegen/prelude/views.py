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
    if backwards and not flip and any(flat_pads):  # (no padding: live everywhere, as flipped)
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



def _band(t, labels, row, slot, size):
    """``t`` (trailing dims ``labels``) read as a band, a strided view: dim ``slot``, of
    ``size``, at ``(i, j)`` is ``t``'s ``(i, i + j)``, ``i`` being dim ``row``."""
    r, j = (t.dim() - len(labels) + labels.index(c) for c in (row, slot))
    return t.as_strided([size if k == j else m for k, m in enumerate(t.shape)],
                        [s + t.stride(j) * (k == r) for k, s in enumerate(t.stride())],
                        t.storage_offset())


def band_einsum(equation, a, b, x, w):
    """``torch.einsum(equation, a, b)``, where the dims ``x`` and ``w`` (letters) of ``b`` may
    be a band: a view whose entry ``(x, w)`` reads row ``x + w`` of one dim of its source (equal
    strides: a window read in reverse order, ``affine_read(..., flip=False)``). In an eager
    16-bit CPU call of more than one row a band is multiplied in blocks of ``K = min(|x|, |w|)``
    rows of ``x``, each against the ``K + |w| - 1`` source rows it reads: a few large products
    instead of one small product per row (16-bit CPU products of small matrices run several
    times slower, and copy an overlapping operand first). ``w`` is kept (``a`` lacks it: the
    band is read off each block's product) or summed (``a`` holds it: laid on zeros as a band
    first)."""
    ins, out = equation.replace("...", "").split("->")
    la, lb = ins.split(",")
    if not (x in la and x in lb and w in lb and x in out and (w in out) != (w in la)):
        return torch.einsum(equation, a, b)
    ix, iw, ax = (t.dim() - len(lt) + lt.index(c)
                  for t, lt, c in ((b, lb, x), (b, lb, w), (a, la, x)))
    if not (b.device.type == "cpu" and b.element_size() == 2 and b.is_floating_point()
            and min(b.shape[iw], b.shape[ix]) > 1 and b.stride(ix) == b.stride(iw) > 0
            and a.shape[ax] == b.shape[ix] and not torch.compiler.is_compiling()
            and not torch.compiler.is_exporting()):
        return torch.einsum(equation, a, b)
    n, W = b.shape[ix], b.shape[iw]
    K = min(n, W)  # rows of x per block
    B, Q, R = [c for c in "BQRJKL" if c not in equation][:3]
    keep = [k for k in range(b.dim()) if k != iw]  # the source rows: b without w, x grown
    src = b.as_strided([n + W - 1 if k == ix else b.shape[k] for k in keep],
                       [b.stride(k) for k in keep], b.storage_offset())
    sx, pad = keep.index(ix), -n % K
    src = F.pad(src, [0, 0] * (src.dim() - 1 - sx) + [0, pad])
    blocks = src.as_strided([*src.shape[:sx], (n + pad) // K, K + W - 1, *src.shape[sx + 1:]],
                            [*src.stride()[:sx], K * src.stride(sx), *src.stride()[sx:]])
    a = F.pad(a, [0, 0] * (a.dim() - 1 - ax) + [0, pad]).unflatten(ax, ((n + pad) // K, K))
    la = la.replace(x, B + Q)
    if w in la:  # summed: each block's rows laid on zeros as its band
        full = a.new_zeros([K + W - 1 if k == a.dim() - len(la) + la.index(w) else m
                            for k, m in enumerate(a.shape)])
        _band(full, la, Q, w, W).copy_(a)
        a, la = full, la.replace(w, R)
    labels, dots = out.replace(x, B + Q).replace(w, R), "..." * ("..." in equation)
    got = torch.einsum(f"{dots}{la},{dots}{lb.replace(w, '').replace(x, B + R)}->{dots}{labels}",
                       a, blocks)
    got = _band(got, labels, Q, R, W) if w in out else got  # kept: each block's band
    at = got.dim() - len(labels) + labels.index(B)
    return got.flatten(at, at + 1).narrow(at, 0, n)
