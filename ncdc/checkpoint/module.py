"""A generated module built on the meta device and filled tensor by tensor.

:func:`build_meta` compiles a block to source in memory, executes it and constructs the root
class under ``torch.device("meta")``: no parameter memory is allocated. :func:`materialize`
then gives every tensor CPU memory (``to_empty``, which allocates without writing), runs
``reset_parameters()`` only of the submodules owning a tensor that no file provides (fixed
arrays computed by rule, or every learned array for synthetic weights, seeded), and copies each
provided tensor in from its source, converting the interpreter's layout to the module's
(``PARAM_LAYOUT``) one tensor at a time. Peak memory is the module plus the largest tensor being
converted plus the checkpoint shards in use.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

from .errors import CheckpointError, listing
from .writers import interpreter_view, is_stored, writer_for

DTYPES = ("float32", "float64", "bfloat16", "float16")


@dataclass
class Built:
    """A generated module and what loading it needs: the generated file (``PARAM_KEYS``,
    ``PARAM_LAYOUT``), the interpreter's parameter specs by key, the torch dtype."""

    generated: object
    module: object
    specs: dict
    dtype: object
    env: object = None

    @property
    def namespace(self):
        # the generated file (a module wrapped by FSDP2's fully_shard has a subclass of its
        # class, defined elsewhere)
        for cls in type(self.module).__mro__:
            mod = sys.modules.get(cls.__module__)
            if hasattr(mod, "PARAM_KEYS"):
                return mod
        return sys.modules[type(self.module).__module__]


@dataclass
class LoadReport:
    """What :func:`materialize` did: tensors copied in (count, bytes in the module), submodules
    reset, the key prefix used to find them, the tensors that are seeded stand-ins."""

    loaded: int = 0
    loaded_bytes: int = 0
    reset: list = field(default_factory=list)
    prefix: str = ""
    synthetic: bool = False
    module_bytes: int = 0


def build_meta(morphism, env, *, quant: str = "exact", reading: str = "faithful",
               dtype: str = "float32", stand_in: bool = False, weights=None,
               runtime=()) -> Built:
    """The generated module of ``morphism``, constructed on the meta device in ``dtype``;
    ``weights``: a storage policy whose formats the module holds its weights in
    (:mod:`codegen.storage`); its file carries the ``loader`` (loading reads its tables) and
    the ``runtime`` features asked for (``codegen.RUNTIME``)."""
    import torch

    from ncdc.codegen.generate import DTYPES as TORCH_DTYPES
    from ncdc.codegen.generate import generate, instantiate, load_module
    from ncdc.ir.params import param_specs

    g = generate(morphism, env, quant=quant, reading=reading, weights=weights,
                 runtime={"loader", *runtime})
    pymod = load_module(g.source)
    kwargs = {"quant": quant} if g.root.needs_quant else {}
    if g.root.needs_stand_in:
        kwargs["stand_in"] = stand_in
    with torch.device("meta"):
        module = instantiate(pymod, g.class_name, TORCH_DTYPES[dtype], **kwargs)
    specs = {p.key: p for p in param_specs(morphism, env)}
    return Built(g, module, specs, TORCH_DTYPES[dtype], env)


def _own(module, prefix: str):
    """Full names of the members ``module`` initialises itself: its parameters and buffers
    (non-persistent ones included) and its weights held in storage formats."""
    names = [n for n, t in module._parameters.items() if t is not None]
    names += [n for n, t in module._buffers.items() if t is not None]
    names += [n for n, m in module._modules.items() if m is not None and is_stored(m)]
    return [prefix + n for n in names]


def _persistent(module, prefix: str):
    skip = getattr(module, "_non_persistent_buffers_set", set())
    return [prefix + n for n, t in module._buffers.items() if t is not None and n not in skip]


def state_tensor(module, name: str):
    """The member of ``module`` a ``PARAM_KEYS`` name denotes: a parameter or buffer (a
    state_dict key), or a submodule holding a weight in a storage format."""
    owner, _, leaf = name.rpartition(".")
    sub = module.get_submodule(owner) if owner else module
    t = sub._parameters.get(leaf)
    if t is None:
        t = sub._buffers.get(leaf)
    return t if t is not None else module.get_submodule(name)


def _check_kind(value, target, key: str, where: str) -> None:
    import torch

    if value.is_complex() and not target.is_complex():
        raise CheckpointError(f"{key}: {where} holds complex values for a real array")
    if value.dtype == torch.bool and target.dtype != torch.bool:
        return
    if (not target.is_floating_point() and not target.is_complex()
            and value.is_floating_point() and not bool((value == value.round()).all())):
        raise CheckpointError(f"{key}: {where} holds non-integral values for an integer array")


def pieces(source, name: str, shape, part=None):
    """``(index, tensor)`` pieces of ``name`` in ``source``: the source's own (a mapped
    checkpoint stacks families piece by piece, for an expert-sliced member only the slice
    ``part`` of :func:`expert_part`), or the whole tensor at index ``()``."""
    if hasattr(source, "pieces"):
        return source.pieces(name, shape, part) if part is not None else \
            source.pieces(name, shape)
    return [((), source.get(name))]


def expert_part(module, name: str):
    """``(n, lo, hi)`` of a member a sharded run splits along its expert axis (the
    generated class's ``EXPERT_DIMS``, the owner's ``experts`` slice), else None."""
    path, _, attr = name.rpartition(".")
    owner = module.get_submodule(path) if path else module
    experts = getattr(owner, "experts", None)
    if attr not in dict(getattr(type(owner), "EXPERT_DIMS", ())) or not isinstance(experts,
                                                                                    dict):
        return None
    return experts["n"], experts["lo"], experts["hi"]


def describe(source, name: str) -> str:
    return source.describe(name) if hasattr(source, "describe") else f"tensor {name!r}"


def materialize(built: Built, source=None, *, key_map: dict | None = None, seed: int = 0,  # noqa: C901 - its steps in order: check keys, reset, copy (whole or sharded), policy
                synthetic: bool = False, policy=None, prefix: str = "") -> LoadReport:
    """Give ``built.module`` CPU memory and its values: the tensors of ``source`` (an object
    with ``get(name)``, optionally ``pieces(name, shape)``, ``expect(names)``) named by
    ``key_map`` (interpreter key -> name in the source); the others by ``reset_parameters()``
    (seeded), which for learned arrays is allowed only when ``synthetic``. ``policy``: a
    :class:`ncdc.interpreter.storage_policy.StoragePolicy` whose formats learned values are
    rounded through once loaded."""
    import torch

    ns = built.namespace
    keys, layouts = ns.PARAM_KEYS, ns.PARAM_LAYOUT
    key_map = dict(key_map or {})
    provided = {name for name, key in keys.items() if key in key_map}
    if not synthetic:
        missing = [key for name, key in keys.items() if name not in provided
                   and built.specs.get(key) is not None and built.specs[key].learned]
        if missing:
            raise CheckpointError(f"{len(missing)} learned array(s) not in the weights: "
                                  f"{listing(missing)}")
    module = built.module
    sharded = getattr(built, "sharded", False)
    module.to_empty(device="cpu")
    report = LoadReport(prefix=prefix, synthetic=synthetic)
    torch.manual_seed(seed)
    with torch.no_grad():
        for sub_name, sub in module.named_modules():
            pre = sub_name + "." if sub_name else ""
            own = _own(sub, pre)
            if own and any(n not in provided for n in own) and hasattr(sub, "reset_parameters") \
                    and not is_stored(sub):
                sub.reset_parameters()
                report.reset.append(sub_name or type(sub).__name__)
        if source is not None:
            source.expect([key_map[keys[n]] for n in keys if n in provided])
        for name, key in keys.items():
            if name not in provided:
                continue
            target = state_tensor(module, name)
            shape = tuple(built.env.size(d) for d in built.specs[key].shape)
            dest = target
            if sharded:  # the whole tensor, then this rank's part (codegen/prelude/distributed.py)
                whole = ns.whole_shape(module, name)
                dest = ns.StoredWeight(whole, target.format, target.lead) if is_stored(target) \
                    else torch.empty(whole, dtype=target.dtype)
            writer = writer_for(dest, layouts.get(name), shape, ns)
            src = key_map[key]
            part = expert_part(module, name) if sharded else None
            for index, value in pieces(source, src, shape, part):
                want = writer.shape_at(index)
                where = describe(source, src)
                if tuple(value.shape) != want:
                    at = f" at index {index[-1]} of axis {len(index) - 1}" if index else ""
                    raise CheckpointError(f"{key}: {where} has shape {tuple(value.shape)}, "
                                          f"expected {want}{at}")
                _check_kind(value, target, key, where)
                writer.write(index, value)
                del value
            writer.finish()
            if sharded:
                ns.copy_part(module, name, dest)
                del dest
            report.loaded += 1
            report.loaded_bytes += member_bytes(target)
        if policy is not None:
            hold(built, policy)
    for sub_name, sub in module.named_modules():
        if hasattr(sub, "data_missing"):
            pre = sub_name + "." if sub_name else ""
            if all(n in provided for n in _persistent(sub, pre)):
                sub.data_missing = False
    report.module_bytes = sum(t.numel() * t.element_size()
                              for t in list(module.parameters()) + list(module.buffers()))
    return report


def member_bytes(member) -> int:
    """Bytes a member holds (a StoredWeight: its codes and scales)."""
    if is_stored(member):
        return sum(t.numel() * t.element_size() for t in member.parameters())
    return member.numel() * member.element_size()


def hold(built, policy) -> None:
    """Round every learned floating tensor through its format under ``policy`` (as the
    interpreter holds it; a float64 copy of one tensor at a time). A tensor sharded by FSDP (a
    DTensor) is gathered whole, rounded, and each rank keeps its part: a collective, so every
    rank calls ``hold`` (scale groups may cross shard boundaries)."""
    import numpy as np
    import torch

    from ncdc.interpreter.storage_policy import decode, encode
    from ncdc.ir.weight_formats import weight_lead

    ns = built.namespace
    for name, key in ns.PARAM_KEYS.items():
        spec = built.specs.get(key)
        fmt = policy.format_for(key)
        if fmt is None or spec is None or not spec.learned:
            continue
        target = state_tensor(built.module, name)
        if is_stored(target) or not target.is_floating_point():
            continue  # a member in its storage format holds exactly the encoded values
        sharded = _is_dtensor(target)
        whole = target.detach().full_tensor().clone() if sharded else target
        shape = tuple(built.env.size(d) for d in spec.shape)
        view = interpreter_view(whole, ns.PARAM_LAYOUT.get(name), shape)
        arr = view.detach().to(torch.float64).numpy()
        held = decode(encode(arr, fmt, weight_lead(spec.site, spec.role)))
        with torch.no_grad():
            view.copy_(torch.from_numpy(np.ascontiguousarray(held)))
            if sharded:
                from torch.distributed.tensor import distribute_tensor

                part = distribute_tensor(whole, target.device_mesh, target.placements,
                                         src_data_rank=None).to_local()
                target.to_local().copy_(part)


def _is_dtensor(t) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed
        return False
    return isinstance(t, DTensor)


def interpreter_arrays(built) -> dict:
    """The module's tensors keyed and laid out as the interpreter's parameters (numpy views
    where the dtype allows; bfloat16 and float16 as float32)."""
    import torch

    ns = built.namespace
    out = {}
    for name, key in ns.PARAM_KEYS.items():
        spec = built.specs.get(key)
        target = state_tensor(built.module, name)
        target = target.dequantize() if is_stored(target) else target.detach()
        shape = tuple(built.env.size(d) for d in spec.shape) if spec is not None \
            else tuple(target.shape)
        view = interpreter_view(target, ns.PARAM_LAYOUT.get(name), shape)
        if view.dtype in (torch.bfloat16, torch.float16):
            view = view.to(torch.float32)
        out[key] = view.numpy()
    return out


def missing_user_data(module) -> list[str]:
    """Submodules still without data only the user can supply (``E_cmp``, ``alpha``)."""
    return [name or type(m).__name__ for name, m in module.named_modules()
            if getattr(m, "data_missing", False)]


__all__ = ["DTYPES", "Built", "LoadReport", "build_meta", "hold", "interpreter_arrays",
           "interpreter_view",
           "materialize", "missing_user_data", "state_tensor"]
