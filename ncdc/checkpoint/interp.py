"""Weights for the reference interpreter: a weights file or a mapped checkpoint as the
interpreter's ``key -> float64 array`` dict, for the keys of the block being evaluated (found
from any root, :mod:`ncdc.checkpoint.keys`)."""
from __future__ import annotations


def interpreter_params(morphism, env, path, map_path=None, *, model_specs=None,
                       prefix: str | None = None):
    """``(params, prefix used)``: the block's arrays from ``path`` (through the checkpoint map
    at ``map_path``, if given), keyed by the block's parameter keys; a learned key the weights
    lack is simply absent (the interpreter reports it)."""
    import numpy as np
    import torch

    from ncdc.interpreter.weights import Loaded, load_params
    from ncdc.ir.params import param_specs

    from .files import open_source
    from .keys import resolve

    specs = param_specs(morphism, env)
    if map_path is None:
        loaded = load_params(path)
        key_map, used = resolve(specs, loaded, model_specs, prefix)
        if not used:
            return loaded, ""
        return Loaded({k: loaded[v] for k, v in key_map.items()}, loaded.metadata,
                      loaded.path), used
    source = open_source(path, map_path, dtype="float64")
    try:
        key_map, used = resolve(specs, source.names(), model_specs, prefix)
        source.expect(list(key_map.values()))
        out = {}
        for p in specs:
            if p.key not in key_map:
                continue
            shape = tuple(env.size(d) for d in p.shape)
            t = source.get(key_map[p.key], shape)
            if t.is_floating_point() and t.dtype != torch.float64:
                t = t.to(torch.float64)
            out[p.key] = np.ascontiguousarray(t.numpy())
    finally:
        source.close()
    return Loaded(out, {}, str(path)), used


__all__ = ["interpreter_params"]
