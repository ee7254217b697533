"""Reindexings as affine gathers (docs/format.md §7) and covariant scatters (§11.14–11.15).

The normalisation of a reindexing to an affine map with its dead rule is ``ir.affine``'s
(:func:`affine_map` here binds it under the env); this module executes such maps on numpy
arrays. A codomain index outside ``[0, size)`` — or an intermediate one of a composition —
reads the universal unit: the position is **dead**. No wrap-around, no clamping.

:func:`gather` reads an array through a map without copying where it can: the read is an
``as_strided`` view of the source (padded with zeros once along the dimensions the map can step
out of), so a sliding window over ``x`` tokens of width ``c`` costs ``(x + w) * c`` memory, not
``x * w * c``. A ``Rearrangement`` becomes a plain transpose / diagonal / broadcast view. When
padding would be disproportionate the read falls back to advanced indexing with clipped
indices and a mask.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ncdc.ir import affine
from ncdc.ir.affine import BoundAffineMap
from ncdc.ir.env import Env

from .values import Value, land


def affine_map(m, env: Env) -> BoundAffineMap:
    """The integer affine map of the reindexing ``m`` under ``env`` (``ir.affine``'s rule)."""
    return affine.affine_map(m).bind(env)


def _grid(row, b, sizes) -> np.ndarray:
    """``row . d + b`` as an integer array broadcastable over the domain box ``sizes``."""
    r = len(sizes)
    g = np.full((1,) * r, b, dtype=np.int64)
    for i, (s, d) in enumerate(zip(row, sizes, strict=True)):
        if s:
            shape = [1] * r
            shape[i] = d
            g = g + s * np.arange(d, dtype=np.int64).reshape(shape)
    return g


def index_grids(am: BoundAffineMap) -> list[np.ndarray]:
    """One integer array per codomain axis, broadcastable over the domain box."""
    return [_grid(row, b, am.dom_sizes) for row, b in zip(am.rows, am.shifts, strict=True)]


def ok_mask(am: BoundAffineMap):
    """Bool array over the domain box (size-1 where independent), or ``None`` if every read is
    in range."""
    if am.always_in_range:
        return None
    out = None
    for check in am.checks():
        if am.in_range(check):
            continue
        g = _grid(check.row, check.shift, am.dom_sizes)
        ok = (g >= 0) & (g < check.size)
        out = ok if out is None else out & ok
    return out


@dataclass(frozen=True)
class GatherPlan:
    """How input ``k`` of a Broadcasted is read: the map from the degree to the axes filling
    the weave's TILED slots, the layout positions of those slots and of the target, and the
    target's logical sizes."""

    amap: BoundAffineMap
    tiled: tuple[int, ...]
    target: tuple[int, ...]
    target_sizes: tuple[int, ...]

    @property
    def layout_rank(self) -> int:
        return len(self.tiled) + len(self.target)

    @cached_property
    def ok(self):
        """:func:`ok_mask` of the map (computed once; never written)."""
        return ok_mask(self.amap)

    @cached_property
    def identity(self) -> bool:
        """Whether the read is the array itself: the TILED slots lead, in degree order, read
        one to one (``cod[j] = dom[j]``), so ``(*batch, *degree, *target)`` is its layout."""
        am = self.amap
        r = len(am.dom_sizes)
        return (self.tiled == tuple(range(r)) and am.dom_sizes == am.cod_sizes
                and not am.constraints and all(b == 0 for b in am.shifts)
                and all(am.rows[j][i] == (1 if i == j else 0) for j in range(r) for i in range(r)))


#: Padding beyond this many elements (relative to the source) switches to indexed gathers.
PAD_FACTOR = 4
PAD_SLACK = 1 << 16


def gather(v: Value, plan: GatherPlan, nb: int) -> Value:
    """Read ``v`` (shape ``(*batch, *layout)``, ``nb`` batch dims) through ``plan``: the result
    has shape ``(*batch, *degree, *target)`` with a degree dimension of size 1 where the read
    does not depend on it, and full target dimensions. Out-of-range reads are dead (value 0)."""
    X = v.values
    rank = nb + plan.layout_rank
    if X.ndim != rank:
        raise ValueError(f"array of rank {X.ndim} where rank {rank} was expected")
    am = plan.amap
    if any(d == 0 for d in am.dom_sizes):
        shape = X.shape[:nb] + am.dom_sizes + tuple(plan.target_sizes)
        return Value(np.zeros(shape, X.dtype), None)
    if plan.identity and all(X.shape[nb + k] == n for k, n in enumerate(am.cod_sizes)) and \
            all(X.shape[nb + p] == n for p, n in zip(plan.target, plan.target_sizes, strict=False)) and \
            (v.live is None or v.live.ndim == X.ndim):
        return v
    ok = plan.ok
    vals, const_oob = _read(X, plan, nb, 0)
    live = None
    if v.live is not None:
        live, _ = _read(v.live, plan, nb, False)
    if ok is not None:
        okf = ok.reshape((1,) * nb + ok.shape + (1,) * len(plan.target))
        if const_oob or not am.constraints_in_range:
            vals = np.where(okf, vals, np.zeros((), vals.dtype))
        live = land(live, okf)
    return Value(vals, live)


def _read(X, plan: GatherPlan, nb: int, fill):
    """Strided (or indexed) read of one array. Returns (array, whether a broadcast source
    dimension was read out of range — then the caller must zero the dead positions)."""
    am = plan.amap
    pos = [nb + p for p in plan.tiled]
    full = [X.shape[p] != 1 or n == 1 for p, n in zip(pos, am.cod_sizes, strict=False)]
    for p, n, f in zip(pos, am.cod_sizes, full, strict=False):
        if f and X.shape[p] != n:
            raise ValueError(f"dimension of size {X.shape[p]} where the axis has size {n}")
    pads = []
    const_oob = False
    for (lo, hi), n, f in zip(am.ranges, am.cod_sizes, full, strict=False):
        if not f:
            pads.append((0, 0))
            const_oob |= lo < 0 or hi > n - 1
        else:
            pads.append((max(0, -lo), max(0, hi - (n - 1))))
    if any(a or b for a, b in pads):
        grown = 1
        for d in range(X.ndim):
            grown *= X.shape[d] + (sum(pads[pos.index(d)]) if d in pos else 0)
        if grown - X.size > PAD_FACTOR * X.size + PAD_SLACK:
            return _indexed_read(X, plan, nb, fill), False
        width = [(0, 0)] * X.ndim
        for k, p in enumerate(pos):
            width[p] = pads[k]
        X = np.pad(X, width, constant_values=fill)
    st = X.strides
    index = [slice(None)] * X.ndim
    for k, p in enumerate(pos):
        if full[k]:
            index[p] = slice(am.shifts[k] + pads[k][0], None)
    base = X[tuple(index)]
    shape, strides = list(X.shape[:nb]), list(st[:nb])
    for i, d in enumerate(am.dom_sizes):
        dep = any(am.rows[k][i] for k in range(len(pos)) if full[k])
        shape.append(d if dep else 1)
        strides.append(sum(am.rows[k][i] * st[p] for k, p in enumerate(pos) if full[k])
                       if dep else 0)
    for p, n in zip(plan.target, plan.target_sizes, strict=False):
        p += nb
        if X.shape[p] not in (n, 1):
            raise ValueError(f"dimension of size {X.shape[p]} where the axis has size {n}")
        shape.append(n)
        strides.append(st[p] if X.shape[p] == n else 0)
    out = np.lib.stride_tricks.as_strided(base, shape=tuple(shape), strides=tuple(strides),
                                          writeable=False)
    return out, const_oob


def _indexed_read(X, plan: GatherPlan, nb: int, fill):
    """Advanced-indexing gather with clipped indices; out-of-range positions get ``fill``."""
    am = plan.amap
    r = len(am.dom_sizes)
    pos = [nb + p for p in plan.tiled]
    idx = [np.zeros_like(g) if X.shape[p] == 1 else np.clip(g, 0, n - 1)
           for g, p, n in zip(index_grids(am), pos, am.cod_sizes, strict=False)]
    Xt = np.moveaxis(X, pos, list(range(nb, nb + len(pos))))
    if idx:
        got = Xt[(slice(None),) * nb + tuple(idx)]
    else:
        got = Xt.reshape(Xt.shape[:nb] + (1,) * r + Xt.shape[nb:])
    ok = ok_mask(am)
    nt = len(plan.target)
    if ok is not None:
        okf = ok.reshape((1,) * nb + ok.shape + (1,) * nt)
        got = np.where(okf, got, np.asarray(fill, dtype=got.dtype))
    return np.broadcast_to(got, got.shape[:got.ndim - nt] + tuple(plan.target_sizes))


def scatter(v: Value, amap: BoundAffineMap, out_sizes: tuple[int, ...], nin: int) -> Value:
    """Covariant write ``out[r(i)] = in[i]`` over the last ``nin`` dims of ``v`` (the map's
    leading domain axes; the input is broadcast over any further domain axes). Positions no
    input position is written to are dead; writes outside the codomain are dropped; if the map
    is not injective the last write (in C order of the domain) wins."""
    X, L = v.values, v.live
    nlead = X.ndim - nin
    dom = tuple(amap.dom_sizes)
    extra = len(dom) - nin
    X = X.reshape(X.shape + (1,) * extra)
    if L is not None:
        L = L.reshape(L.shape + (1,) * extra)
    lead = np.broadcast_shapes(X.shape[:nlead], L.shape[:nlead] if L is not None else ())
    Xb = np.broadcast_to(X, lead + dom)
    ok = np.ones(dom, dtype=bool)
    grids = [np.broadcast_to(g, dom) for g in index_grids(amap)]
    for g, n in zip(grids, out_sizes, strict=False):
        ok &= (g >= 0) & (g < n)
    for row, b, n in amap.constraints:
        g = np.broadcast_to(_grid(row, b, dom), dom)
        ok &= (g >= 0) & (g < n)
    sel = (slice(None),) * nlead + tuple(g[ok] for g in grids)
    out = np.zeros(lead + tuple(out_sizes), dtype=X.dtype)
    live = np.zeros(lead + tuple(out_sizes), dtype=bool)
    out[sel] = Xb[(Ellipsis, ok)]
    live[sel] = True if L is None else np.broadcast_to(L, lead + dom)[(Ellipsis, ok)]
    return Value(out, None if live.all() else live)
