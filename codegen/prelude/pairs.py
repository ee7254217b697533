"""Arrays on a data-dependent sparse axis computed at its live pairs only (pasted into generated
files when used).

A top-k selection keeps, at every row (every index of the leading dims), a few live slots of a
sparse axis such as ``k/e``; an array on that axis is only ever read at those slots. A *pairs
array* holds one row per (row, slot) pair, ``[pairs, *rest]``. ``pairs = (rows, slots, third)``:
the row of each pair in the flattened leading dims, its slot, and

* in the sparse form, ``counts``: how many pairs each slot has (a list, so the per-slot loops
  need no device sync); the pairs are exactly the live ones;
* in the static form, ``live``: a bool tensor, one entry per pair; every row has exactly ``k``
  pairs (its live slots, then dead pairs at slot 0), so every shape is fixed by the input shapes
  and ``k``. It is the form while torch traces the model (``torch.compile``, ``torch.export``:
  no graph break, no data-dependent guard) and wherever ``static_shapes=True`` asks for it;
  eager calls otherwise take the sparse form.

In both forms ``live_pairs`` groups the pairs by slot (slot 0's first, each group in row
order), so every grouped product (the custom op ``ncdc::grouped_matmul``: one
``torch._grouped_mm`` where it takes the operands) reads and writes the pairs in place, with no
sort or permutation of its own; the inputs are gathered at the rows once (``take_rows``) and the
results stay in pair order until ``add_rows`` sums them into their rows. Pairs in another order
(a caller's own) are still right: the products group them first and put them back.
"""

import math

import torch


def tracing():
    """Whether torch is tracing the running code (dynamo, ``torch.export``) rather than running it
    eagerly."""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting()


def live_pairs(live, lead, k=None, static=False):
    """The live positions of a mask ``[*lead, n]`` (broadcast to ``lead``) as pairs grouped by
    slot: exactly the live ones, or (``static``, or while tracing) ``k`` per row."""
    n = live.shape[-1]
    flat = live.expand(*lead, n).reshape(-1, n)
    if static or tracing():
        positions = torch.arange(n, device=live.device)
        picks = torch.where(flat, positions, n).sort(dim=-1).values[:, :k]
        if k > n:
            picks = torch.cat([picks, picks.new_full((picks.shape[0], k - n), n)], dim=-1)
        pair_live = (picks < n).reshape(-1)
        slots = torch.where(pair_live, picks.reshape(-1), 0)
        order = torch.argsort(slots, stable=True)  # the one sort: products need none
        return order // k, slots.index_select(0, order), pair_live.index_select(0, order)
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


def _grouped_by_slot(slots):
    """Whether the pairs are grouped by slot (``slots`` never decreases)."""
    return slots.shape[0] < 2 or bool((slots[1:] >= slots[:-1]).all())


def _slot_products(rows, weight, dim, slots, counts=None):
    """``rows[p] @ weight.select(dim, slots[p])`` (the slice flattened to a matrix) for every
    pair ``p``: one matrix product per slot that has pairs, written in place. With ``counts``
    the pairs are grouped by slot already; else they are grouped first (sorted by slot, the
    products put back) unless they are."""
    n = weight.shape[dim]
    width = math.prod(weight.shape[:dim] + weight.shape[dim + 1:]) // rows.shape[1]
    if counts is None:
        if not _grouped_by_slot(slots):
            order = torch.argsort(slots, stable=True)
            grouped = _slot_products(rows.index_select(0, order), weight, dim,
                                     slots.index_select(0, order))
            return torch.empty_like(grouped).index_copy_(0, order, grouped)
        counts = torch.bincount(slots, minlength=n).tolist()
    out, start = None, 0
    for slot, count in enumerate(counts):
        if count:
            part = rows[start:start + count] @ weight.select(dim, slot).reshape(rows.shape[1],
                                                                                width)
            if out is None:
                out = part.new_empty(rows.shape[0], width)
            out[start:start + count] = part
            start += count
    return out if out is not None else rows.new_zeros(0, width)


def _grouped_mm_takes(rows, grouped):
    """Whether ``torch._grouped_mm`` takes ``rows [pairs, inner]`` and ``grouped [n, inner,
    width]``: float32, bfloat16 or float16 alike, unit last strides, every other stride and the
    weight's address a multiple of 16 bytes."""
    size = rows.element_size()
    return (rows.dtype in (torch.float32, torch.bfloat16, torch.float16) and rows.shape[0] > 0
            and grouped.dim() == 3 and grouped.dtype == rows.dtype
            and grouped.shape[1] == rows.shape[1] and rows.stride(1) == 1
            and grouped.stride(2) == 1 and grouped.data_ptr() % 16 == 0
            and all(s * size % 16 == 0 for s in (rows.stride(0), grouped.shape[2],
                                                 *grouped.stride()[:2])))


def _grouped_products(rows, weight, dim, slots):
    """``_slot_products``, as one ``torch._grouped_mm`` where that kernel takes the operands
    (the same per-slot products, without a Python loop over slots). Pairs grouped by slot (as
    ``live_pairs`` makes them) are used in place; others are grouped first and put back."""
    n = weight.shape[dim]
    grouped = weight.movedim(dim, 0)
    if not _grouped_mm_takes(rows, grouped):
        return _slot_products(rows, weight, dim, slots)
    if not _grouped_by_slot(slots):
        order = torch.argsort(slots, stable=True)
        out = _grouped_products(rows.index_select(0, order), weight, dim,
                                slots.index_select(0, order))
        return torch.empty_like(out).index_copy_(0, order, out)
    ends = torch.searchsorted(slots, torch.arange(1, n + 1, device=slots.device),
                              out_int32=True)  # where each slot's group ends
    return torch._grouped_mm(rows, grouped, offs=ends)


def _slot_gradients(grad, rows, weight, dim, slots):
    """The gradients of ``_slot_products`` with respect to ``rows`` and ``weight``."""
    if not _grouped_by_slot(slots):
        order = torch.argsort(slots, stable=True)
        grad_rows, grad_weight = _slot_gradients(grad.index_select(0, order),
                                                 rows.index_select(0, order), weight, dim,
                                                 slots.index_select(0, order))
        return torch.empty_like(grad_rows).index_copy_(0, order, grad_rows), grad_weight
    grad_rows = torch.zeros_like(rows)
    grad_weight = torch.zeros_like(weight)
    start = 0
    for slot, count in enumerate(torch.bincount(slots, minlength=weight.shape[dim]).tolist()):
        if count:
            w = weight.select(dim, slot).reshape(rows.shape[1], -1)
            g = grad[start:start + count]
            grad_rows[start:start + count] = g @ w.t()
            part = grad_weight.select(dim, slot)
            part.copy_((rows[start:start + count].t() @ g).reshape(part.shape))
            start += count
    return grad_rows, grad_weight


def _define_grouped_matmul():
    """The custom op ``ncdc::grouped_matmul(rows, weight, dim, slots)``: the per-slot products
    with a fake kernel, a backward (itself the op ``ncdc::grouped_matmul_backward``) and FLOP
    counts (``FlopCounterMode``), so a compiled or exported graph holds it whole; defined once
    per process, with ``torch.library.Library`` (its kernels are plain functions: a first call
    imports nothing, where ``torch.library.custom_op`` would load torch._dynamo)."""
    try:
        return torch.ops.ncdc.grouped_matmul
    except (AttributeError, RuntimeError):
        pass

    lib = torch.library.Library("ncdc", "FRAGMENT")
    lib.define("grouped_matmul(Tensor rows, Tensor weight, int dim, Tensor slots) -> Tensor")
    lib.define("grouped_matmul_backward(Tensor grad, Tensor rows, Tensor weight, int dim, "
               "Tensor slots) -> (Tensor, Tensor)")
    lib.impl("grouped_matmul", _grouped_products, "CompositeExplicitAutograd")
    lib.impl("grouped_matmul_backward", _slot_gradients, "CompositeExplicitAutograd")

    def fake(rows, weight, dim, slots):
        return rows.new_empty(rows.shape[0], weight.numel() // (weight.shape[dim] * rows.shape[1]))

    def fake_backward(grad, rows, weight, dim, slots):
        return torch.empty_like(rows), torch.empty_like(weight)

    torch.library.register_fake("ncdc::grouped_matmul", fake, lib=lib)
    torch.library.register_fake("ncdc::grouped_matmul_backward", fake_backward, lib=lib)

    def setup_context(ctx, inputs, output):
        rows, weight, dim, slots = inputs
        ctx.save_for_backward(rows, weight, slots)
        ctx.dim = dim

    def backward(ctx, grad):
        rows, weight, slots = ctx.saved_tensors
        grad_rows, grad_weight = torch.ops.ncdc.grouped_matmul_backward(
            grad.contiguous(), rows, weight, ctx.dim, slots)
        return grad_rows, grad_weight, None, None

    torch.library.register_autograd("ncdc::grouped_matmul", backward,
                                    setup_context=setup_context, lib=lib)
    torch.ops.ncdc.grouped_matmul.library = lib  # the registrations live as long as the op

    from torch.utils.flop_counter import register_flop_formula

    @register_flop_formula(torch.ops.ncdc.grouped_matmul)
    def _(rows, weight, *args, out_shape=None, **kwargs):  # shapes: the products done
        return 2 * rows[0] * rows[1] * out_shape[1]

    @register_flop_formula(torch.ops.ncdc.grouped_matmul_backward)
    def _(grad, rows, *args, out_shape=None, **kwargs):  # both gradients
        return 4 * grad[0] * grad[1] * rows[1]

    return torch.ops.ncdc.grouped_matmul


grouped_matmul = _define_grouped_matmul()


def pairwise_matmul(x, weight, dim, pairs):
    """``x[p] @ weight.select(dim, slot of p)`` at every pair ``p``. ``x`` is
    ``[pairs, *inner]``; ``weight`` holds the inner dims first, then the output dims, the sparse
    axis at ``dim`` among them. A weight held in a storage format (``StoredWeight``) is
    dequantized one slot at a time in the sparse form, whole in the static form. The sparse
    form knows its counts: where fewer than half the slots have pairs (a few tokens: a decoding
    step) it loops over those slots, since ``torch._grouped_mm`` visits every slot."""
    inner = x.shape[1:]
    out_shape = (weight.shape[:dim] + weight.shape[dim + 1:])[len(inner):]
    rows = x.reshape(x.shape[0], math.prod(inner))
    static = isinstance(pairs[2], torch.Tensor)
    if isinstance(weight, torch.Tensor) and (
            static or 2 * sum(map(bool, pairs[2])) >= len(pairs[2])):
        out = grouped_matmul(rows, weight, dim, pairs[1])
    elif static:
        out = grouped_matmul(rows, weight.dequantize(), dim, pairs[1])
    else:
        out = _slot_products(rows, weight, dim, pairs[1], pairs[2])
    return out.reshape(x.shape[0], *out_shape)


def add_rows(values, lead, pairs):
    """The sum of the pairs array ``values`` over the live pairs of each row: ``[*lead, *rest]``
    (0 at a row without pairs)."""
    rows, _, third = pairs
    rest = values.shape[1:]
    total = math.prod(lead)
    if isinstance(third, torch.Tensor):  # dead pairs go to a spare row, even where they are NaN
        rows = torch.where(third, rows, total)
    out = values.new_zeros(total + 1, *rest).index_add_(0, rows, values)[:total]
    return out.reshape(*lead, *rest)


def pairs_to_dense(values, lead, n, pairs):
    """The pairs array ``values`` laid out densely, ``[*lead, n, *rest]`` (0 at other slots)."""
    rows, slots, third = pairs
    rest = values.shape[1:]
    total = math.prod(lead) * n
    at = rows * n + slots
    if isinstance(third, torch.Tensor):  # dead pairs go to a spare row
        at = torch.where(third, at, total)
    out = values.new_zeros(total + 1, *rest).index_copy(0, at, values)[:total]
    return out.reshape(*lead, n, *rest)
