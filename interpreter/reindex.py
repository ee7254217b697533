"""Reindexings as affine gathers (FORMAT.md §7) and covariant scatters (§11.14–11.15).

Every stride-category morphism of a spec (``Rearrangement``, ``StrideMorphism`` and
``Composed`` / ``ProductOfMorphisms`` / ``Block`` of them) is lowered once to an
:class:`AffineMap`: ``cod[j] = sum_i S[j][i] * dom[i] + shift[j]`` with integer ``S`` and
``shift`` (symbolic strides and shifts evaluated under the env), plus the range conditions of any
intermediate index of a composition. A codomain index outside ``[0, size)`` — or an
intermediate one — reads the universal unit: the position is **dead**. No wrap-around, no
clamping.

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

from ir.env import Env
from ir.errors import SpecError
from ir.morphisms import Block, Composed, ProductOfMorphisms, Rearrangement, StrideMorphism

from .values import Value, land


@dataclass(frozen=True)
class AffineMap:
    """``cod[j] = S[j] . dom + shift[j]``; live iff every ``cod[j]`` and every constraint
    ``c . dom + s`` lies in ``[0, size)``."""

    dom_sizes: tuple[int, ...]
    cod_sizes: tuple[int, ...]
    S: tuple[tuple[int, ...], ...]
    shift: tuple[int, ...]
    constraints: tuple[tuple[tuple[int, ...], int, int], ...] = ()

    @property
    def ranges(self) -> list[tuple[int, int]]:
        """(lowest, highest) codomain index over the domain box, per codomain axis."""
        return [_range(row, b, self.dom_sizes) for row, b in zip(self.S, self.shift)]

    @property
    def always_in_range(self) -> bool:
        if any(d == 0 for d in self.dom_sizes):
            return True
        for (lo, hi), n in zip(self.ranges, self.cod_sizes):
            if lo < 0 or hi > n - 1:
                return False
        for row, b, n in self.constraints:
            lo, hi = _range(row, b, self.dom_sizes)
            if lo < 0 or hi > n - 1:
                return False
        return True

    def index_grids(self) -> list[np.ndarray]:
        """One integer array per codomain axis, broadcastable over the domain box."""
        return [_grid(row, b, self.dom_sizes) for row, b in zip(self.S, self.shift)]

    def ok_mask(self):
        """Bool array over the domain box (size-1 where independent), or ``None`` if every
        read is in range."""
        if self.always_in_range:
            return None
        out = None
        rows = [(row, b, n) for row, b, n in zip(self.S, self.shift, self.cod_sizes)]
        for row, b, n in list(rows) + list(self.constraints):
            lo, hi = _range(row, b, self.dom_sizes)
            if lo >= 0 and hi <= n - 1:
                continue
            g = _grid(row, b, self.dom_sizes)
            ok = (g >= 0) & (g < n)
            out = ok if out is None else out & ok
        return out


def _range(row, b, sizes) -> tuple[int, int]:
    lo = hi = b
    for s, d in zip(row, sizes):
        span = s * (d - 1)
        lo += min(0, span)
        hi += max(0, span)
    return lo, hi


def _grid(row, b, sizes) -> np.ndarray:
    r = len(sizes)
    g = np.full((1,) * r, b, dtype=np.int64)
    for i, (s, d) in enumerate(zip(row, sizes)):
        if s:
            shape = [1] * r
            shape[i] = d
            g = g + s * np.arange(d, dtype=np.int64).reshape(shape)
    return g


def affine_map(m, env: Env) -> AffineMap:
    """Lower a stride-category morphism to an :class:`AffineMap` under ``env``."""
    if isinstance(m, Block):
        return affine_map(m.body, env)
    if isinstance(m, Rearrangement):
        dom = tuple(m.dom_)
        sizes = env.sizes(dom)
        S = tuple(tuple(1 if i == k else 0 for i in range(len(dom))) for k in m.mapping)
        return AffineMap(sizes, tuple(sizes[k] for k in m.mapping), S, (0,) * len(m.mapping))
    if isinstance(m, StrideMorphism):
        dom = tuple(m.dom_)
        S, shift = [], []
        for row in m.rows:
            if len(row.strides) != len(dom):
                raise SpecError(f"stride row for {row.axis.label} has {len(row.strides)} "
                                f"strides for a domain of {len(dom)} axes", m.path,
                                node_type="StrideMorphism")
            S.append(tuple(env.size(s) for s in row.strides))
            shift.append(env.size(row.shift))
        return AffineMap(env.sizes(dom), env.sizes(m.cod), tuple(S), tuple(shift))
    if isinstance(m, ProductOfMorphisms):
        parts = [affine_map(p, env) for p in m.content]
        n = sum(len(p.dom_sizes) for p in parts)
        S, shift, cons, off = [], [], [], 0
        for p in parts:
            k = len(p.dom_sizes)
            S.extend(_widen(row, off, n) for row in p.S)
            shift.extend(p.shift)
            cons.extend((_widen(row, off, n), b, size) for row, b, size in p.constraints)
            off += k
        return AffineMap(tuple(d for p in parts for d in p.dom_sizes),
                         tuple(c for p in parts for c in p.cod_sizes), tuple(S), tuple(shift),
                         tuple(cons))
    if isinstance(m, Composed):
        if not m.content:
            raise SpecError("empty composition of reindexings", m.path, node_type="Composed")
        acc = affine_map(m.content[0], env)
        for nxt in m.content[1:]:
            acc = _compose(acc, affine_map(nxt, env), m.path)
        return acc
    raise SpecError(f"a {type(m).__name__} cannot be used as a reindexing",
                    getattr(m, "path", ""), node_type=type(m).__name__)


def _widen(row, off: int, n: int) -> tuple[int, ...]:
    """A part's row placed at domain offset ``off`` of an ``n``-axis product domain."""
    return (0,) * off + tuple(row) + (0,) * (n - off - len(row))


def _compose(f: AffineMap, g: AffineMap, path: str) -> AffineMap:
    """``g after f``: f's codomain indices become range conditions."""
    if len(f.cod_sizes) != len(g.dom_sizes):
        raise SpecError("composed reindexings do not join", path, node_type="Composed")
    r = len(f.dom_sizes)

    def through(row, b):
        new = tuple(sum(row[j] * f.S[j][i] for j in range(len(row))) for i in range(r))
        return new, b + sum(row[j] * f.shift[j] for j in range(len(row)))

    S, shift = zip(*[through(row, b) for row, b in zip(g.S, g.shift)]) if g.S else ((), ())
    cons = list(f.constraints) + [(row, b, n) for row, b, n in zip(f.S, f.shift, f.cod_sizes)]
    cons += [through(row, b) + (n,) for row, b, n in g.constraints]
    return AffineMap(f.dom_sizes, g.cod_sizes, tuple(S), tuple(shift), tuple(cons))


@dataclass(frozen=True)
class GatherPlan:
    """How input ``k`` of a Broadcasted is read: the map from the degree to the axes filling
    the weave's TILED slots, the layout positions of those slots and of the target, and the
    target's logical sizes."""

    amap: AffineMap
    tiled: tuple[int, ...]
    target: tuple[int, ...]
    target_sizes: tuple[int, ...]

    @property
    def layout_rank(self) -> int:
        return len(self.tiled) + len(self.target)

    @cached_property
    def identity(self) -> bool:
        """Whether the read is the array itself: the TILED slots lead, in degree order, read
        one to one (``cod[j] = dom[j]``), so ``(*batch, *degree, *target)`` is its layout."""
        am = self.amap
        r = len(am.dom_sizes)
        return (self.tiled == tuple(range(r)) and am.dom_sizes == am.cod_sizes
                and not am.constraints and all(b == 0 for b in am.shift)
                and all(am.S[j][i] == (1 if i == j else 0) for j in range(r) for i in range(r)))


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
            all(X.shape[nb + p] == n for p, n in zip(plan.target, plan.target_sizes)) and \
            (v.live is None or v.live.ndim == X.ndim):
        return v
    ok = am.ok_mask()
    vals, const_oob = _read(X, plan, nb, 0)
    live = None
    if v.live is not None:
        live, _ = _read(v.live, plan, nb, False)
    if ok is not None:
        okf = ok.reshape((1,) * nb + ok.shape + (1,) * len(plan.target))
        if const_oob or _constraint_oob(am):
            vals = np.where(okf, vals, np.zeros((), vals.dtype))
        live = land(live, okf)
    return Value(vals, live)


def _constraint_oob(am: AffineMap) -> bool:
    """Whether an intermediate index of a composition can leave its axis (then the final read
    is in range but dead, and the value read must be zeroed)."""
    for row, b, n in am.constraints:
        lo, hi = _range(row, b, am.dom_sizes)
        if lo < 0 or hi > n - 1:
            return True
    return False


def _read(X, plan: GatherPlan, nb: int, fill):
    """Strided (or indexed) read of one array. Returns (array, whether a broadcast source
    dimension was read out of range — then the caller must zero the dead positions)."""
    am = plan.amap
    pos = [nb + p for p in plan.tiled]
    full = [X.shape[p] != 1 or n == 1 for p, n in zip(pos, am.cod_sizes)]
    for p, n, f in zip(pos, am.cod_sizes, full):
        if f and X.shape[p] != n:
            raise ValueError(f"dimension of size {X.shape[p]} where the axis has size {n}")
    pads = []
    const_oob = False
    for (lo, hi), n, f in zip(am.ranges, am.cod_sizes, full):
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
            index[p] = slice(am.shift[k] + pads[k][0], None)
    base = X[tuple(index)]
    shape, strides = list(X.shape[:nb]), list(st[:nb])
    for i, d in enumerate(am.dom_sizes):
        dep = any(am.S[k][i] for k in range(len(pos)) if full[k])
        shape.append(d if dep else 1)
        strides.append(sum(am.S[k][i] * st[p] for k, p in enumerate(pos) if full[k])
                       if dep else 0)
    for p, n in zip(plan.target, plan.target_sizes):
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
           for g, p, n in zip(am.index_grids(), pos, am.cod_sizes)]
    Xt = np.moveaxis(X, pos, list(range(nb, nb + len(pos))))
    if idx:
        got = Xt[(slice(None),) * nb + tuple(idx)]
    else:
        got = Xt.reshape(Xt.shape[:nb] + (1,) * r + Xt.shape[nb:])
    ok = am.ok_mask()
    nt = len(plan.target)
    if ok is not None:
        okf = ok.reshape((1,) * nb + ok.shape + (1,) * nt)
        got = np.where(okf, got, np.asarray(fill, dtype=got.dtype))
    return np.broadcast_to(got, got.shape[:got.ndim - nt] + tuple(plan.target_sizes))


def scatter(v: Value, amap: AffineMap, out_sizes: tuple[int, ...], nin: int) -> Value:
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
    grids = [np.broadcast_to(g, dom) for g in amap.index_grids()]
    for g, n in zip(grids, out_sizes):
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
