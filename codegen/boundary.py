"""Liveness at the boundary of a generated module.

An input array with a sparse axis (a window ``w|x``, an expert's routed rows ``k/e``) can carry
dead positions: a window's out-of-range slots, experts no token was routed to. The root class of
a generated module accepts an optional mask ``<input>_live`` (keyword-only, ``None`` = all live)
for each such input, so a block compiled on its own computes what it computes inside the model.
The generator treats those inputs as possibly dead everywhere (their ``sure`` liveness is False),
which makes every downstream operator honour the mask.
"""
from __future__ import annotations

import inspect

import numpy as np

from ncdc.ir.arrays import Array
from ncdc.ir.axes import AffineSparseAxis, SparseAxis

from .liveness import StaticLive
from .statements import ASSIGN, Statement


def can_be_dead(array: Array) -> bool:
    """Whether an input array has an axis whose positions may be dead."""
    return any(isinstance(a, (AffineSparseAxis, SparseAxis)) for a in array.shape)


def input_statics(gen, dom) -> list:
    """Static liveness of each root input: unknown (possibly dead) where it can be dead."""
    out = []
    for arr in dom:
        if not can_be_dead(arr):
            out.append(None)
            continue
        shape = tuple(gen.ref_size(a.size) for a in arr.shape)
        out.append(StaticLive(np.ones(shape, dtype=bool), np.zeros(shape, dtype=bool)))
    return out


def default_statements(var: str, live: str) -> list[Statement]:
    """The forward's first statements: an omitted mask is all live; dead positions hold 0 (what
    the generated code assumes of every dead position)."""
    return [Statement(ASSIGN, f"torch.ones_like({var}, dtype=torch.bool) if {live} is None "
                      f"else {live}", (live,)),
            Statement(ASSIGN, f"torch.where({live}, {var}, 0)", (var,))]


def mask_names(module, dom) -> dict[int, str]:
    """Input position -> name of its optional mask argument in ``module.forward``."""
    names = [p.name for p in inspect.signature(module.forward).parameters.values()
             if p.kind is p.KEYWORD_ONLY and p.name.endswith("_live")]
    slots = [k for k, arr in enumerate(dom) if can_be_dead(arr)]
    return dict(zip(slots, names, strict=True)) if len(slots) == len(names) else {}


__all__ = ["can_be_dead", "default_statements", "input_statics", "mask_names"]
