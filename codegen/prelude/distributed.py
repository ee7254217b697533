"""Running a generated module on several processes with torch.distributed (pasted at the end of
files generated with the ``distributed`` runtime, ``codegen.generate.RUNTIME``).

Build on the meta device, shard, then allocate, so that no rank ever holds the whole model::

    with torch.device("meta"):
        model = Model()
    shard(model, mesh)                  # experts: one slice per rank; dense parameters: FSDP2
    model.to_empty(device="cpu")
    load_shard(model, params)           # each rank copies its part only

* **Expert parallel** (``shard_experts``): a class with ``EXPERT_DIMS`` (its parameters on a
  selected sparse axis such as the routed experts' ``k/e``, found from the IR:
  ``codegen/experts.py``) keeps its rank's contiguous slice of the axis (``expert_bounds``:
  uneven splits allowed, a rank may hold none). Its forward sends the inputs' rows of every live
  (row, slot) pair to the rank owning the slot (``all_to_all_single``, differentiable), runs the
  owner's slice on the pairs it received (grouped by slot, the senders in rank order) and sends
  the results back in the caller's pair order, for the caller's gated sum.
* **Dense parameters** (``shard``): FSDP2 ``fully_shard`` over ``mesh``, one unit per generated
  block, the expert parameters left out. Gradients are those of the *sum* of the ranks' losses:
  FSDP's division by the world size is switched off, so the dense gradients agree with the
  experts', which add up the pairs of every rank.
* **Weights in storage formats** (``StoredWeight``: codes and, in MX formats, one scale per
  group of 32 along a run): an expert weight is cut with ``StoredWeight.narrow`` along the
  rows its expert axis indexes, codes and scales alike (the groups lie along the other dims,
  the contracted input of a routed expert, so no group is cut). A dense stored weight is left
  out of FSDP2 and held whole on every rank (frozen storage: no gradient, nothing to reduce).
"""

import functools

import torch
import torch.distributed as dist
from torch import nn


def expert_bounds(n, world):
    """Where each rank's slice of an axis of ``n`` starts, and the end: rank ``r`` holds
    ``[n * r // world, n * (r + 1) // world)``."""
    return [n * r // world for r in range(world + 1)]


def expert_slice(n, group=None):
    """This rank's slice ``[lo, hi)`` of an expert axis of ``n`` (a dict: ``n``, ``lo``,
    ``hi``, ``bounds``, ``rank``, ``world`` and the ``group`` that shares the axis)."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    bounds = expert_bounds(n, world)
    return {"n": n, "lo": bounds[rank], "hi": bounds[rank + 1], "bounds": bounds,
            "rank": rank, "world": world, "group": group}


def _owner(experts, slots):
    """The rank holding each slot."""
    inner = torch.tensor(experts["bounds"][1:-1], dtype=slots.dtype, device=slots.device)
    return torch.searchsorted(inner, slots, right=True)


def _exchange(x, out_sizes, in_sizes, group):
    """``all_to_all_single`` of the rows of ``x`` (differentiable): ``in_sizes[r]`` rows go to
    rank ``r``, ``out_sizes[r]`` come from it."""
    import torch.distributed._functional_collectives as funcol
    if x.dtype == torch.bool:
        return _exchange(x.to(torch.uint8), out_sizes, in_sizes, group).bool()
    if x.is_complex():
        return torch.view_as_complex(_exchange(torch.view_as_real(x), out_sizes, in_sizes,
                                               group))
    if torch.is_grad_enabled() and not x.requires_grad:
        # every rank must join the backward exchange, also one whose own rows need no
        # gradient (no rows, or none reaching a parameter): a zero with a gradient joins it
        x = x + x.new_zeros((), requires_grad=True)
    return funcol.wait_tensor(funcol.all_to_all_single_autograd(
        x.contiguous(), out_sizes, in_sizes, group or dist.group.WORLD))


def _rows(x, rank, lead):
    """``x`` (trailing ``rank`` dims, broadcast to ``lead``) as ``[rows, *trailing]``."""
    tail = x.shape[x.dim() - rank:]
    return x.expand(*lead, *tail).reshape(-1, *tail)


def _on_owners(module, experts, *args, **kwargs):
    """``module``'s forward for pairs spread over the ranks holding their slots (see the module
    docstring); every rank of the group must call it, with or without pairs of its own."""
    *inputs, pairs = args
    if pairs is None:
        raise RuntimeError(f"{type(module).__name__} holds a slice of its experts: call it with "
                           "the pairs of a selection")
    ranks = type(module).INPUT_RANKS
    lead = torch.broadcast_shapes(*(x.shape[:x.dim() - r] for x, r in zip(inputs, ranks)))
    rows, slots, third = pairs
    total = rows.shape[0]
    kept = None
    if isinstance(third, torch.Tensor):  # static form: the dead pairs stay here, as 0
        kept = third.nonzero().squeeze(1)
        rows, slots = rows.index_select(0, kept), slots.index_select(0, kept)
    owner = _owner(experts, slots)
    order = torch.argsort(owner, stable=True)
    send = torch.bincount(owner, minlength=experts["world"])
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=experts["group"])
    send, recv = send.tolist(), recv.tolist()
    got_slots = torch.empty(sum(recv), dtype=slots.dtype, device=slots.device)
    dist.all_to_all_single(got_slots, slots.index_select(0, order).contiguous(), recv, send,
                           group=experts["group"])
    at = rows.index_select(0, order)
    got = [_exchange(_rows(x, r, lead).index_select(0, at), recv, send, experts["group"])
           for x, r in zip(inputs, ranks)]
    local = got_slots - experts["lo"]
    grouped = torch.argsort(local, stable=True)
    counts = torch.bincount(local, minlength=experts["hi"] - experts["lo"]).tolist()
    outs = type(module).forward(module, *got, (grouped, local.index_select(0, grouped), counts),
                                **kwargs)
    # an exact 0 that depends on every received array: the backward exchange of the inputs
    # then runs on every rank, also where no pair arrived (its results depend on nothing)
    link = sum(g[:0].sum() for g in got if g.requires_grad)
    results = []
    for y in outs if isinstance(outs, tuple) else (outs,):
        if torch.is_tensor(link) and y.is_floating_point():
            y = y + link
        y = torch.zeros_like(y).index_copy(0, grouped, y)  # in the order received
        y = _exchange(y, send, recv, experts["group"])
        y = torch.zeros_like(y).index_copy(0, order, y)  # in the caller's pair order
        if kept is not None:
            y = y.new_zeros(total, *y.shape[1:]).index_copy(0, kept, y)
        results.append(y)
    return tuple(results) if isinstance(outs, tuple) else results[0]


def _is_stored(m):
    """Whether ``m`` is a weight held in a storage format (a StoredWeight, duck-typed: this
    code is pasted also into files without one)."""
    return hasattr(m, "encode_") and hasattr(m, "codes")


def _slice(p, dim, lo, hi):
    """Rows ``[lo, hi)`` of dim ``dim`` of a parameter or a StoredWeight (no gradient)."""
    if _is_stored(p):
        return p.narrow(dim, lo, hi - lo)
    return nn.Parameter(p.detach().narrow(dim, lo, hi - lo).clone(),
                        requires_grad=p.requires_grad)


def shard_experts(module, group=None):
    """Give every expert-parallel submodule of ``module`` (a class with ``INPUT_RANKS``, the
    outermost one on each path) this rank's slice of its expert axis: the parameters listed in
    ``EXPERT_DIMS`` (attribute, dim) below it are replaced by their slice (on any device, meta
    included; a StoredWeight's codes and scales alike) and its forward routes pairs to their
    owners. Returns the set of sliced parameters (a StoredWeight's: its codes and scales)."""
    sliced = set()

    def visit(m):
        if not hasattr(type(m), "INPUT_RANKS") or "forward" in vars(m):
            for child in m.children():
                visit(child)
            return
        owners = [(sub, attr, dim) for sub in m.modules()
                  for attr, dim in getattr(type(sub), "EXPERT_DIMS", ())]
        sizes = {getattr(sub, attr).shape[dim] for sub, attr, dim in owners}
        if len(sizes) != 1:
            raise ValueError(f"{type(m).__name__}: expert axis of sizes {sorted(sizes)}")
        experts = expert_slice(sizes.pop(), group)
        for sub, attr, dim in owners:
            part = _slice(getattr(sub, attr), dim, experts["lo"], experts["hi"])
            setattr(sub, attr, part)
            sub.experts = experts
            sliced.update(part.parameters() if _is_stored(part) else [part])
        m.forward = functools.partial(_on_owners, m, experts)

    visit(module)
    return sliced


def shard(module, mesh, group=None):
    """Shard ``module`` over the 1-d device mesh ``mesh`` (best built on the meta device, then
    ``to_empty``): experts by ``shard_experts`` over ``group`` (default: the mesh's), every other
    parameter by FSDP2 ``fully_shard``, one unit per generated block (innermost first) and the
    root, except weights held in storage formats, whole on every rank. Returns ``module``."""
    from torch.distributed.fsdp import fully_shard
    experts = shard_experts(module, mesh.get_group() if group is None else group)
    kept = experts | {p for m in module.modules() if _is_stored(m) for p in m.parameters()}
    blocks = [m for m in module.modules()
              if not isinstance(m, (nn.Linear, nn.ModuleList)) and not _is_stored(m)]
    for m in reversed(blocks):
        dense = [p for p in m.parameters() if p not in kept]
        if dense or m is module:
            fully_shard(m, mesh=mesh, ignored_params=kept & set(m.parameters()))
            m.set_gradient_divide_factor(1.0)
    return module


def whole_shape(module, name):
    """The shape of the whole tensor ``name`` (a state_dict key) of a module sharded by
    ``shard``: an FSDP shard's global shape, an expert slice's with the whole expert axis."""
    path, _, attr = name.rpartition(".")
    owner = module.get_submodule(path)
    shape = list(getattr(owner, attr).shape)
    dim = dict(getattr(type(owner), "EXPERT_DIMS", ())).get(attr)
    if dim is not None and hasattr(owner, "experts"):
        shape[dim] = owner.experts["n"]
    return tuple(shape)


def copy_part(module, name, value):
    """Copy this rank's part of ``value`` (the whole tensor ``name``, laid out as the module
    holds it) into a module sharded by ``shard``: an expert slice takes its experts, an FSDP
    shard its rows, any other tensor all of it. A StoredWeight member takes a StoredWeight
    (its codes and scales, bit for bit) or real values, which it encodes after the cut."""
    from torch.distributed.tensor import DTensor, distribute_tensor
    path, _, attr = name.rpartition(".")
    owner = module.get_submodule(path)
    target = getattr(owner, attr)
    if tuple(value.shape) != whole_shape(module, name):
        raise ValueError(f"{name}: shape {tuple(value.shape)}, expected "
                         f"{whole_shape(module, name)}")
    dim = dict(getattr(type(owner), "EXPERT_DIMS", ())).get(attr)
    if dim is not None and hasattr(owner, "experts"):
        value = value.narrow(dim, owner.experts["lo"], owner.experts["hi"] - owner.experts["lo"])
    if _is_stored(target):
        with torch.no_grad():
            if not _is_stored(value):
                target.encode_(value)
            elif value.format != target.format or value.lead != target.lead:
                raise ValueError(f"{name}: {value.format} (lead {value.lead}) given for "
                                 f"{target.format} (lead {target.lead})")
            else:
                for mine, given in zip(target.parameters(), value.parameters()):
                    mine.copy_(given)
        return
    if isinstance(target, DTensor):
        value = distribute_tensor(value.to(target.dtype), target.device_mesh,
                                  target.placements, src_data_rank=None).to_local()
        target = target.to_local()
    with torch.no_grad():
        target.copy_(value.to(target.dtype))


def load_shard(module, params):
    """``load_interpreter_params`` for a module sharded by ``shard``: each rank copies only
    its part of every array keyed like the reference interpreter (``params[key]``)."""
    # PARAM_KEYS and PARAM_LAYOUT are the generated file's tables, above this code
    missing = [key for key in PARAM_KEYS.values() if key not in params]  # noqa: F821
    if missing:
        raise KeyError(f"no array for {missing[0]!r} ({len(missing)} missing)")
    for name, key in PARAM_KEYS.items():  # noqa: F821
        value = torch.as_tensor(params[key])
        layout = PARAM_LAYOUT.get(name)  # noqa: F821
        if layout is not None:  # [in..., out...] -> nn.Linear's [out, in] (bias: [out])
            rows = whole_shape(module, name)[0]
            value = value.reshape(-1, rows).T if layout[0] else value.reshape(-1)
        copy_part(module, name, value)
    for m in module.modules():
        if hasattr(m, "data_missing"):
            m.data_missing = False
    return module


def gather_full(module, grads=False):
    """``{parameter name: whole tensor}`` of a module sharded by ``shard``, of the values or
    (``grads``) of the gradients (None where there is none; always for the codes and scales of
    a StoredWeight, frozen storage): a collective, every rank calls it; FSDP shards and expert
    slices (a StoredWeight's codes and scales too) are gathered whole. For checks and
    saving."""
    from torch.distributed.tensor import DTensor
    out = {}
    for name, p in module.named_parameters():
        value = p.grad if grads else p.detach()
        path, _, attr = name.rpartition(".")
        owner = module.get_submodule(path)
        dim = dict(getattr(type(owner), "EXPERT_DIMS", ())).get(attr)
        stored_in = _expert_stored(module, path) if _is_stored(owner) else None
        if isinstance(p, DTensor):
            value = None if value is None else value.full_tensor()
        elif stored_in is not None and value is not None:
            axis = owner.row_axis(stored_in[0])
            whole = _gather_slices(owner.rows_view(value), axis, stored_in[1])
            value = whole if owner.scales is None else whole.reshape(-1, value.shape[-1])
        elif dim is not None and hasattr(owner, "experts"):
            value = _gather_slices(p.new_zeros(p.shape) if value is None else value, dim,
                                   owner.experts)
        out[name] = value
    return out


def _expert_stored(module, path):
    """(dim, expert slice) of the StoredWeight at ``path`` if it is an expert weight cut by
    ``shard_experts``, else None."""
    parent, _, attr = path.rpartition(".")
    owner = module.get_submodule(parent)
    dim = dict(getattr(type(owner), "EXPERT_DIMS", ())).get(attr)
    return None if dim is None or not hasattr(owner, "experts") else (dim, owner.experts)


def _gather_slices(value, dim, experts):
    """The whole expert axis from every rank's slice of it (uneven slices allowed; 8-bit
    floats, such as stored codes and scales, travel as bytes: gloo has no FP8)."""
    if value.is_floating_point() and value.element_size() == 1:
        return _gather_slices(value.view(torch.uint8), dim, experts).view(value.dtype)
    bounds, group = experts["bounds"], experts["group"]
    sizes = [bounds[r + 1] - bounds[r] for r in range(experts["world"])]
    width = max(sizes)
    pad = list(value.shape)
    pad[dim] = width - value.shape[dim]
    padded = torch.cat([value, value.new_zeros(pad)], dim).contiguous()
    parts = [torch.empty_like(padded) for _ in range(experts["world"])]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([p.narrow(dim, 0, size) for p, size in zip(parts, sizes)], dim)
