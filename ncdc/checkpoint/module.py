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

import math
import sys
from dataclasses import dataclass, field

from .errors import CheckpointError, listing

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
               dtype: str = "float32", stand_in: bool = False) -> Built:
    """The generated module of ``morphism``, constructed on the meta device in ``dtype``."""
    import torch

    from ncdc.codegen.generate import DTYPES as TORCH_DTYPES
    from ncdc.codegen.generate import generate, instantiate, load_module
    from ncdc.ir.params import param_specs

    g = generate(morphism, env, quant=quant, reading=reading)
    pymod = load_module(g.source)
    kwargs = {"quant": quant} if g.root.needs_quant else {}
    if g.root.needs_stand_in:
        kwargs["stand_in"] = stand_in
    with torch.device("meta"):
        module = instantiate(pymod, g.class_name, TORCH_DTYPES[dtype], **kwargs)
    specs = {p.key: p for p in param_specs(morphism, env)}
    return Built(g, module, specs, TORCH_DTYPES[dtype], env)


def _own(module, prefix: str):
    """Full state names of the tensors ``module`` holds itself (parameters and buffers,
    non-persistent buffers included)."""
    names = [n for n, t in module._parameters.items() if t is not None]
    names += [n for n, t in module._buffers.items() if t is not None]
    return [prefix + n for n in names]


def _persistent(module, prefix: str):
    skip = getattr(module, "_non_persistent_buffers_set", set())
    return [prefix + n for n, t in module._buffers.items() if t is not None and n not in skip]


def state_tensor(module, name: str):
    """The parameter or buffer of ``module`` named ``name`` (a state_dict key)."""
    owner, _, leaf = name.rpartition(".")
    sub = module.get_submodule(owner) if owner else module
    t = sub._parameters.get(leaf)
    return t if t is not None else sub._buffers[leaf]


def to_module_layout(value, target_shape, layout, key: str, where: str):
    """``value`` (the interpreter's layout) as the module holds it: an ``nn.Linear``'s
    ``[in..., out...]`` weight flattened to ``[out, in]`` (bias ``[out]``); shape checked."""
    if layout is not None:
        n_in, n_out = layout
        out = target_shape[0]
        if (value.dim() != n_in + n_out or value.numel() != math.prod(target_shape)
                or math.prod(value.shape[n_in:]) != out):
            raise CheckpointError(f"{key}: {where} has shape {tuple(value.shape)}; expected "
                                  f"{n_in} input and {n_out} output axes flattening to "
                                  f"{tuple(target_shape)}")
        value = value.reshape(-1, out).T if n_in else value.reshape(-1)
    if tuple(value.shape) != tuple(target_shape):
        raise CheckpointError(f"{key}: {where} has shape {tuple(value.shape)}, expected "
                              f"{tuple(target_shape)}")
    return value


def _check_kind(value, target, key: str, where: str) -> None:
    import torch

    if value.is_complex() and not target.is_complex():
        raise CheckpointError(f"{key}: {where} holds complex values for a real array")
    if value.dtype == torch.bool and target.dtype != torch.bool:
        return
    if (not target.is_floating_point() and not target.is_complex()
            and value.is_floating_point() and not bool((value == value.round()).all())):
        raise CheckpointError(f"{key}: {where} holds non-integral values for an integer "
                                  "array")


def _held(value, spec, fmt: str):
    """``value`` rounded through weight format ``fmt`` (the interpreter's storage policy)."""
    import numpy as np
    import torch

    from ncdc.interpreter.storage_policy import decode, encode
    from ncdc.ir.weight_formats import weight_lead

    arr = value.detach().to(torch.float64).numpy() if value.dtype != torch.float64 \
        else value.detach().numpy()
    return torch.from_numpy(np.ascontiguousarray(
        decode(encode(arr, fmt, weight_lead(spec.site, spec.role)))))


def materialize(built: Built, source=None, *, key_map: dict | None = None, seed: int = 0,
                synthetic: bool = False, policy=None, prefix: str = "") -> LoadReport:
    """Give ``built.module`` CPU memory and its values: tensors of ``source`` (a
    :class:`ncdc.checkpoint.sources.ParamSource`-like object with ``get(name)``) named by
    ``key_map`` (interpreter key -> name in the source); the others by ``reset_parameters()``
    (seeded), which for learned arrays is allowed only when ``synthetic``. ``policy``: a
    :class:`ncdc.interpreter.storage_policy.StoragePolicy` whose formats the values are
    rounded through."""
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
    module.to_empty(device="cpu")
    report = LoadReport(prefix=prefix, synthetic=synthetic)
    torch.manual_seed(seed)
    with torch.no_grad():
        for sub_name, sub in module.named_modules():
            pre = sub_name + "." if sub_name else ""
            own = _own(sub, pre)
            if own and any(n not in provided for n in own) and hasattr(sub, "reset_parameters"):
                sub.reset_parameters()
                report.reset.append(sub_name or type(sub).__name__)
        if source is not None:
            source.expect([key_map[keys[n]] for n in keys if n in provided])
        for name, key in keys.items():
            if name not in provided:
                continue
            target = state_tensor(module, name)
            where = f"tensor {key_map[key]!r}"
            value = source.get(key_map[key])
            spec = built.specs.get(key)
            fmt = policy.format_for(key) if policy is not None else None
            if fmt is not None and spec is not None and spec.learned and \
                    target.is_floating_point() and not value.is_complex():
                value = _held(value, spec, fmt)
            value = to_module_layout(value, tuple(target.shape), layouts.get(name), key, where)
            _check_kind(value, target, key, where)
            target.copy_(value)
            report.loaded += 1
            report.loaded_bytes += target.numel() * target.element_size()
            del value
        if policy is not None and synthetic:
            _hold_all(built, policy, skip=provided)
    for sub_name, sub in module.named_modules():
        if hasattr(sub, "data_missing"):
            pre = sub_name + "." if sub_name else ""
            if all(n in provided for n in _persistent(sub, pre)):
                sub.data_missing = False
    report.module_bytes = sum(t.numel() * t.element_size()
                              for t in list(module.parameters()) + list(module.buffers()))
    return report


def source_layout(value, layout, shape):
    """The inverse of :func:`to_module_layout`: a module tensor in the interpreter's layout
    ``shape``."""
    if layout is None:
        return value.reshape(shape)
    return value.T.reshape(shape) if layout[0] else value.reshape(shape)


def _hold_all(built, policy, skip=()) -> None:
    """Round every learned floating tensor not in ``skip`` through its policy format."""
    ns = built.namespace
    for name, key in ns.PARAM_KEYS.items():
        spec = built.specs.get(key)
        fmt = policy.format_for(key)
        if name in skip or fmt is None or spec is None or not spec.learned:
            continue
        target = state_tensor(built.module, name)
        if not target.is_floating_point():
            continue
        layout = ns.PARAM_LAYOUT.get(name)
        shape = tuple(int(d) for d in built.env.sizes(spec.shape))
        inter = source_layout(target, layout, shape)
        target.copy_(to_module_layout(_held(inter, spec, fmt), tuple(target.shape), layout,
                                      key, "synthetic"))


def missing_user_data(module) -> list[str]:
    """Submodules still without data only the user can supply (``E_cmp``, ``alpha``)."""
    return [name or type(m).__name__ for name, m in module.named_modules()
            if getattr(m, "data_missing", False)]


__all__ = ["DTYPES", "Built", "LoadReport", "build_meta", "materialize", "missing_user_data",
           "state_tensor", "to_module_layout"]
