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

A bfloat16 or float16 argument on the CPU that is a view reading some elements more than once (a
sliding window over the tokens) is copied, chunk by chunk, into memory of its own, the chunked
dim outermost and the others in the order of their strides (the order that reads the source
straight through): CPU batched products in those dtypes copy such an operand into a layout of
their own at every product, one copy for each product that reads it. The chunk's rows then also
keep that copy within the budget.
"""

import math

import torch

CHUNK_BYTES = 4 << 20
"""The budget of one chunk: the bytes of its widest intermediate (at least one row)."""


def _carries(a, d) -> bool:
    return d is not None and a.dim() >= -d and a.shape[d] != 1


def _copied(a) -> bool:
    """Whether the chunks of ``a`` are copied: a reduced-precision CPU view whose elements
    overlap, with no broadcast dim (a copy would materialise it), in an eager call (a compiler
    chooses its own layouts)."""
    dims = [(n, abs(st)) for n, st in zip(a.shape, a.stride()) if n > 1]
    return (a.device.type == "cpu" and a.element_size() < 4 and a.is_floating_point()
            and not (torch.compiler.is_compiling() or torch.compiler.is_exporting())
            and all(st for _, st in dims)
            and 1 + sum((n - 1) * st for n, st in dims) < math.prod(n for n, _ in dims))


def _compact(a, d):
    """``a`` in memory of its own: dim ``d`` outermost, the others by decreasing stride."""
    d %= a.dim()
    order = [d] + sorted((i for i in range(a.dim()) if i != d), key=lambda i: -abs(a.stride(i)))
    return a.permute(order).contiguous().permute([order.index(i) for i in range(a.dim())])


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
    copied = [_carries(a, d) and _copied(a) for a, d in zip(args, dims)]
    row_bytes = max([row_bytes] + [a.numel() // n * a.element_size()
                                   for a, c in zip(args, copied) if c])
    rows = max(1, CHUNK_BYTES // max(row_bytes, 1))
    if rows >= n and not any(copied):
        return fn(*args)
    count = -(-n // rows)
    if count == 1:
        return fn(*(_compact(a, d) if c else a for a, d, c in zip(args, dims, copied)))
    outs = joined = None
    for i in range(count):  # chunks of even sizes (the first n % count one row longer)
        start, size = i * (n // count) + min(i, n % count), n // count + (i < n % count)
        part = [a.narrow(d, start, size) if _carries(a, d) else a for a, d in zip(args, dims)]
        part = [_compact(a, d) if c else a for a, d, c in zip(part, dims, copied)]
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
