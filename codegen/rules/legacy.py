"""Operators of the older pyncd generation."""
from __future__ import annotations

from ncdc.ir.errors import SpecError
from ncdc.ir.operators import WeightedTriangularLower

from .. import liveness
from ..operands import OpResult
from ..registry import rule

WTL_EPSILON = 1e-8


@rule(WeightedTriangularLower)
def weighted_tril(ctx):
    """``T = tril(X)`` on the square target ``[r, c]`` (keep ``c <= r``), then
    ``Y = T / (sum_c T + 1e-8)``: a causal renormalisation. Liveness passes through."""
    if len(ctx.ops) != 1:
        raise SpecError("WeightedTriangularLower takes one input", ctx.b.path)
    o = ctx.ops[0]
    tl = [lab for lab in o.labels if lab[0] == "t"]
    if len(tl) != 2:
        raise SpecError("WeightedTriangularLower acts on a two-axis target", ctx.b.path)
    keep = [lab for lab in o.labels if lab[0] != "t"]
    src = ctx.aligned(0, keep + tl)
    rows, cols = ctx.size(tl[0]), ctx.size(tl[1])
    out = keep + [("o", 0, 0), ("o", 0, 1)]
    mask = ctx.bind("causal", f"torch.ones({rows}, {cols}, dtype=torch.bool, "
                    f"device={src}.device).tril()", note="keep c <= r")
    lower = ctx.bind("lower", f"torch.where({mask}, {src}, 0)", out)
    var = ctx.bind("weighted", f"{lower} / ({lower}.sum(dim=-1, keepdim=True) + {WTL_EPSILON})",
                   out)
    if o.live is None:
        return [OpResult(var, out)]
    live = ctx.aligned_live(0, keep + tl)
    var = ctx.bind(var, ctx.where_live(live, var), out)

    st = (liveness.align(o.static[0], o.labels, keep + tl),
          liveness.align(o.static[1], o.labels, keep + tl))
    return [OpResult(var, out, live, st)]
