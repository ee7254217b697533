"""A block run over chunks of its token axis (pasted into generated files that chunk a call).

``chunked(fn, *args, dims, out_dims, width)`` is ``fn(*args)`` for a ``fn`` that computes every
position of one axis from the same position of its arguments alone (ncdc decides this from the
spec, ``codegen/chunks.py``), run over chunks of that axis so that its intermediates never
exist for the whole axis at once. The number of chunks comes from :data:`CHUNK_BYTES`: a
chunk's widest intermediate (``width`` elements per position of the axis, at every position of
the dims in front of the axis) holds at most that much; the chunks are of even sizes. They are
slices (views) of the arguments; the results are written into tensors allocated once. A length
traced as symbolic (dynamic shapes under ``torch.export`` or ``torch.compile``) runs in one
call.
"""

import math

import torch

CHUNK_BYTES = 4 << 20
"""The budget of one chunk: the bytes of its widest intermediate (at least one row)."""


def _carries(a, d) -> bool:
    return d is not None and a.dim() >= -d and a.shape[d] != 1


def chunked(fn, *args, dims, out_dims, width):
    """``fn(*args)``, computed over chunks of one axis: ``dims[i]`` is the dim of ``args[i]``
    holding the axis (None: not carried; a size-1 dim broadcasts and is passed whole),
    ``out_dims[j]`` that of result ``j`` (None, or size 1 in every chunk: the same in each)."""
    held = [(a, d) for a, d in zip(args, dims) if _carries(a, d)]
    if not held or isinstance(held[0][0].shape[held[0][1]], torch.SymInt):
        return fn(*args)  # nothing to cut, or a symbolic length (the loop needs a number)
    n = held[0][0].shape[held[0][1]]
    lead = torch.broadcast_shapes(*(a.shape[:a.dim() + d] for a, d in held))
    row_bytes = width * math.prod(lead) * max(a.element_size() for a, _ in held)
    rows = max(1, CHUNK_BYTES // max(row_bytes, 1))
    if rows >= n:
        return fn(*args)
    count = -(-n // rows)
    outs = joined = None
    for i in range(count):  # chunks of even sizes (the first n % count one row longer)
        start, size = i * (n // count) + min(i, n % count), n // count + (i < n % count)
        part = [a.narrow(d, start, size) if _carries(a, d) else a for a, d in zip(args, dims)]
        got = fn(*part)
        got = got if isinstance(got, tuple) else (got,)
        if outs is None:  # allocated once, from the first chunk's results
            joined = [d is not None and (g.shape[d] != 1 or size == 1)
                      for g, d in zip(got, out_dims)]
            outs = [g.new_empty(g.shape[:d] + (n,) + g.shape[d:][1:]) if j else g
                    for g, d, j in zip(got, out_dims, joined)]
        for out, g, d, j in zip(outs, got, out_dims, joined):
            if j:
                out.narrow(d, start, size).copy_(g)
    return outs[0] if len(outs) == 1 else tuple(outs)
