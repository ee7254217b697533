"""Arrays on a data-dependent sparse axis computed at its live pairs only (pasted into generated
files when used).

A top-k selection keeps, at every row (every index of the leading dims), a few live slots of a
sparse axis such as ``k/e``; an array on that axis is only ever read at those slots. A *pairs
array* holds one row per (row, slot) pair, ``[pairs, *rest]``. ``pairs = (rows, slots, third)``,
grouped by slot (slot 0's first, each group in row order): the row of each pair in the
flattened leading dims, its slot, and

* in the sparse form (eager calls), ``counts``: how many pairs each slot has (a list); the
  pairs are exactly the live ones;
* in the static form (while torch traces the model, or with ``static_shapes=True``), ``live``:
  a bool tensor, one entry per pair; every row has exactly ``k`` pairs (its live slots, then
  dead pairs at slot 0), so every shape is fixed by the input shapes and ``k``.

The inputs are gathered at the rows once (``take_rows``); each product over the slots' weights
is one ``ncdc::grouped_matmul`` (a custom op, so a traced graph holds it whole); the results
stay in pair order until ``add_rows`` sums them into their rows.
"""

import math

import torch
import torch.nn.functional as F


def tracing():
    """Whether torch is tracing the running code (dynamo, ``torch.export``)."""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting()


def live_pairs(live, lead, k=None, static=False):
    """The live positions of a mask ``[*lead, n]`` (broadcast to ``lead``) as pairs grouped by
    slot: exactly the live ones, or (``static``, or while tracing) ``k`` per row."""
    n = live.shape[-1]
    flat = live.expand(*lead, n).reshape(-1, n)
    if static or tracing():
        picks = torch.where(flat, torch.arange(n, device=live.device), n)
        picks = F.pad(picks, (0, max(0, k - n)), value=n).sort(dim=-1).values[:, :k]
        pair_live = (picks < n).reshape(-1)
        slots = torch.where(pair_live, picks.reshape(-1), 0)
        order = torch.argsort(slots, stable=True)
        return order // k, slots.index_select(0, order), pair_live.index_select(0, order)
    slots, rows = flat.t().nonzero(as_tuple=True)
    return rows, slots, torch.bincount(slots, minlength=n).tolist()


def by_slot(dim, *shape):
    """``torch.empty(*shape)`` held one slot (index of dim ``dim``) after another in memory, so
    each slot's slice, the operand of one product, is a contiguous matrix."""
    return torch.empty(shape[dim], *shape[:dim], *shape[dim + 1:]).movedim(0, dim)


def take_rows(x, rank, lead, pairs):
    """``x`` (trailing ``rank`` dims, broadcast to ``lead``) at the row of every pair."""
    tail = x.shape[x.dim() - rank:]
    return x.expand(*lead, *tail).reshape(-1, *tail).index_select(0, pairs[0])


def take_pairs(x, rank, lead, pairs):
    """``x`` (trailing ``rank`` dims, the sparse axis first, broadcast to ``lead``) at every
    pair: ``[pairs, *trailing[1:]]``."""
    tail = x.shape[x.dim() - rank:]
    flat = x.expand(*lead, *tail).reshape(-1, *tail[1:])
    return flat.index_select(0, pairs[0] * tail[0] + pairs[1])


def _grouped_mm_takes(rows, grouped):
    """Whether ``torch._grouped_mm`` takes ``rows [pairs, inner]`` and ``grouped [n, inner,
    width]``: float32, bfloat16 or float16 alike, unit last strides, every other stride and the
    weight's address a multiple of 16 bytes."""
    size = rows.element_size()
    return (rows.dtype in (torch.float32, torch.bfloat16, torch.float16) and rows.shape[0] > 0
            and grouped.dim() == 3 and grouped.dtype == rows.dtype and rows.stride(1) == 1
            and grouped.stride(2) == 1 and grouped.data_ptr() % 16 == 0
            and all(s * size % 16 == 0 for s in (rows.stride(0), grouped.shape[2],
                                                 *grouped.stride()[:2])))


def _products(rows, weight, dim, counts):
    """``rows[p] @ weight.select(dim, slot of p)`` (the slice as a matrix) for pairs grouped by
    slot, ``counts[s]`` of slot ``s``: one ``torch._grouped_mm`` where it takes the operands
    and at least half the slots are busy (it visits every slot); else one product per busy
    slot (a StoredWeight is dequantized one slot at a time)."""
    if isinstance(weight, torch.Tensor) and 2 * sum(map(bool, counts)) >= len(counts) \
            and _grouped_mm_takes(rows, weight.movedim(dim, 0)):
        ends = torch.tensor(counts, device=rows.device).cumsum(0, dtype=torch.int32)
        return torch._grouped_mm(rows, weight.movedim(dim, 0), offs=ends)
    parts, start = [], 0
    for slot, count in enumerate(counts):
        if count:
            matrix = weight.select(dim, slot).reshape(rows.shape[1], -1)
            parts.append(rows[start:start + count] @ matrix)
            start += count
    return torch.cat(parts) if parts else rows.new_empty(0, 0)


def _slot_gradients(grad, rows, weight, dim, slots):
    """The gradients of ``_products`` with respect to ``rows`` and ``weight``: per busy slot,
    its gradient rows times its matrix transposed, and its rows transposed times them."""
    counts = torch.bincount(slots, minlength=weight.shape[dim]).tolist()
    grad_rows, grad_weight, start = torch.zeros_like(rows), torch.zeros_like(weight), 0
    for slot, count in enumerate(counts):
        if count:
            w, g = weight.select(dim, slot), grad[start:start + count]
            grad_rows[start:start + count] = g @ w.reshape(rows.shape[1], -1).t()
            grad_weight.select(dim, slot).copy_((rows[start:start + count].t() @ g).view(w.shape))
            start += count
    return grad_rows, grad_weight


def _define_grouped_matmul():
    """The custom op ``ncdc::grouped_matmul(rows, weight, dim, slots)`` (pairs grouped by
    slot): ``_products`` with a fake kernel, a backward (the op
    ``ncdc::grouped_matmul_backward``) and FLOP counts, so a compiled or exported graph holds
    it whole; defined once per process with ``torch.library.Library`` (plain kernels: a first
    call imports nothing)."""
    if hasattr(torch.ops.ncdc, "grouped_matmul"):
        return torch.ops.ncdc.grouped_matmul
    lib = torch.library.Library("ncdc", "FRAGMENT")
    lib.define("grouped_matmul(Tensor rows, Tensor weight, int dim, Tensor slots) -> Tensor")
    lib.define("grouped_matmul_backward(Tensor grad, Tensor rows, Tensor weight, int dim, "
               "Tensor slots) -> (Tensor, Tensor)")
    lib.impl("grouped_matmul", lambda rows, weight, dim, slots: _products(
        rows, weight, dim, torch.bincount(slots, minlength=weight.shape[dim]).tolist()),
        "CompositeExplicitAutograd")
    lib.impl("grouped_matmul_backward", _slot_gradients, "CompositeExplicitAutograd")
    torch.library.register_fake(
        "ncdc::grouped_matmul", lambda rows, weight, dim, slots: rows.new_empty(
            rows.shape[0], weight.numel() // (weight.shape[dim] * rows.shape[1])), lib=lib)
    torch.library.register_fake(
        "ncdc::grouped_matmul_backward", lambda grad, rows, weight, dim, slots: (
            torch.empty_like(rows), torch.empty_like(weight)), lib=lib)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], inputs[1], inputs[3])
        ctx.dim = inputs[2]

    def backward(ctx, grad):
        rows, weight, slots = ctx.saved_tensors
        return (*torch.ops.ncdc.grouped_matmul_backward(grad.contiguous(), rows, weight,
                                                         ctx.dim, slots), None, None)

    torch.library.register_autograd("ncdc::grouped_matmul", backward,
                                    setup_context=setup_context, lib=lib)
    torch.ops.ncdc.grouped_matmul.library = lib  # the registrations live as long as the op

    from torch.utils.flop_counter import register_flop_formula

    # shapes: the products done, and both gradients
    register_flop_formula(torch.ops.ncdc.grouped_matmul)(
        lambda rows, weight, *args, out_shape=None, **kw: 2 * rows[0] * rows[1] * out_shape[1])
    register_flop_formula(torch.ops.ncdc.grouped_matmul_backward)(
        lambda grad, rows, *args, out_shape=None, **kw: 4 * grad[0] * grad[1] * rows[1])

    return torch.ops.ncdc.grouped_matmul


grouped_matmul = _define_grouped_matmul()


def pairwise_matmul(x, weight, dim, pairs):
    """``x[p] @ weight.select(dim, slot of p)`` at every pair ``p``. ``x`` is
    ``[pairs, *inner]``; ``weight`` holds the inner dims first, then the output dims, the sparse
    axis at ``dim`` among them: one ``ncdc::grouped_matmul``, or, in an eager call that needs no
    gradient and runs under no torch dispatch mode (a FLOP counter counts the op), the op's own
    kernel with the counts at hand (no dispatch, no recount of the slots: 7% of the routed
    experts at 256 bfloat16 rows). A weight held in a storage format
    (``StoredWeight``) is dequantized one slot at a time in the sparse form, whole in the
    static form."""
    inner = x.shape[1:]
    out_shape = (weight.shape[:dim] + weight.shape[dim + 1:])[len(inner):]
    rows = x.reshape(x.shape[0], math.prod(inner))
    grad = torch.is_grad_enabled() and (rows.requires_grad or getattr(weight, "requires_grad", 0))
    if isinstance(pairs[2], list) and not grad and \
            not torch.utils._python_dispatch.is_in_torch_dispatch_mode():
        out = _products(rows, weight, dim, pairs[2])  # the op's kernel, without the op
    elif isinstance(weight, torch.Tensor):
        out = grouped_matmul(rows, weight, dim, pairs[1])
    elif isinstance(pairs[2], torch.Tensor):
        out = grouped_matmul(rows, weight.dequantize(), dim, pairs[1])
    else:
        out = _products(rows, weight, dim, pairs[2])
    return out.reshape(x.shape[0], *out_shape)


def _scatter(values, at, live, total, add=False):
    """The pairs array ``values`` placed at the flat rows ``at`` of ``total`` (added where
    ``add``, else copied: each row is written once), 0 elsewhere; a pair that is not live (the
    static form) goes to a spare row, even where it is NaN."""
    if isinstance(live, torch.Tensor):
        at = torch.where(live, at, total)
    out = values.new_zeros(total + 1, *values.shape[1:])
    return (out.index_add_(0, at, values) if add else out.index_copy(0, at, values))[:total]


def add_rows(values, lead, pairs):
    """The sum of the pairs array ``values`` over the live pairs of each row: ``[*lead, *rest]``
    (0 at a row without pairs)."""
    rows, _, third = pairs
    summed = _scatter(values, rows, third, math.prod(lead), add=True)
    return summed.reshape(*lead, *values.shape[1:])


def pairs_to_dense(values, lead, n, pairs):
    """The pairs array ``values`` laid out densely, ``[*lead, n, *rest]`` (0 at other slots)."""
    rows, slots, third = pairs
    dense = _scatter(values, rows * n + slots, third, math.prod(lead) * n)
    return dense.reshape(*lead, n, *values.shape[1:])
