"""Static liveness: which positions of a wire can hold the universal unit (docs/format.md §2.4).

The generator only emits mask code where a position can actually be dead, so dense paths stay
plain tensor code. It decides by propagating two boolean arrays per wire through the same rules
the interpreter applies at run time, at reference sizes (the compile binding with every
data-fixed size at its smallest value, where windows are most often dead):

* ``possible``: the position may be live;
* ``sure``: the position is live whatever the data (``sure`` implies ``possible``).

A wire whose ``sure`` is all True needs no mask (``None``). Data-dependent deadness (top-k)
makes ``sure`` False while ``possible`` stays True. Arrays keep size-1 dims where liveness does
not vary, so they stay small even at released sizes.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StaticLive:
    possible: np.ndarray
    sure: np.ndarray

    def digest(self) -> str:
        h = hashlib.sha256()
        for a in (self.possible, self.sure):
            h.update(repr(a.shape).encode())
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()[:16]


def make(possible, sure) -> StaticLive | None:
    """Normalise: None when every position is surely live."""
    possible = np.asarray(possible, dtype=bool)
    sure = np.asarray(sure, dtype=bool) & possible
    if sure.all():
        return None
    return StaticLive(possible, sure)


def full(ndim: int) -> np.ndarray:
    return np.ones((1,) * ndim, dtype=bool)


def parts(live: StaticLive | None, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    if live is None:
        return full(ndim), full(ndim)
    return live.possible, live.sure


def align(arr: np.ndarray, src: list, dst: list, shape_of=None) -> np.ndarray:
    """numpy twin of :func:`codegen.emit.align_code` (labels of the array's dims); as there,
    every label of ``src`` must be in ``dst`` (numpy's transpose would only say "axes don't
    match array")."""
    cur = list(src)
    extra = [lab for lab in cur if lab not in dst]
    if extra or arr.ndim != len(cur):
        raise AssertionError(f"align: labels {extra} would be dropped" if extra else
                             f"align: {arr.ndim} dims labelled {cur}")
    a = arr
    while True:
        dup = next((lab for i, lab in enumerate(cur) if lab in cur[i + 1:]), None)
        if dup is None:
            break
        i = cur.index(dup)
        j = cur.index(dup, i + 1)
        if a.shape[i] != a.shape[j]:
            n = max(a.shape[i], a.shape[j])
            shape = list(a.shape)
            shape[i] = shape[j] = n
            a = np.broadcast_to(a, shape)
        a = np.diagonal(a, axis1=i, axis2=j)
        cur = [lab for k, lab in enumerate(cur) if k not in (i, j)] + [dup]
    present = [lab for lab in dst if lab in cur]
    a = np.transpose(a, [cur.index(lab) for lab in present])
    shape = [a.shape[present.index(lab)] if lab in present else 1 for lab in dst]
    return a.reshape(shape)


def positions(rows, sizes) -> list[np.ndarray]:
    """Source index of every box position, per row (broadcast over the box)."""
    r = len(sizes)
    grids = [np.arange(n).reshape([n if k == i else 1 for k in range(r)])
             for i, n in enumerate(sizes)]
    out = []
    for strides, shift in rows:
        c = np.full((1,) * r, shift, dtype=np.int64)
        for s, g in zip(strides, grids, strict=True):
            if s:
                c = c + s * g
        out.append(c)
    return out


def read(arr: np.ndarray, extent, rows, sizes) -> tuple[np.ndarray, np.ndarray]:
    """Gather the trailing ``len(rows)`` dims of ``arr`` (broadcast to ``extent``) at the
    affine positions over the box ``sizes``: (gathered, in_range)."""
    p = len(rows)
    lead = arr.shape[:arr.ndim - p]
    a = np.broadcast_to(arr, tuple(lead) + tuple(extent))
    idx = positions(rows, sizes)
    ok = np.ones(tuple(sizes), dtype=bool)
    for c, n in zip(idx, extent, strict=True):
        ok = ok & (c >= 0) & (c < n)
    clipped = [np.broadcast_to(np.clip(c, 0, max(n - 1, 0)), tuple(sizes))
               for c, n in zip(idx, extent, strict=True)]
    if any(n == 0 for n in extent):
        got = np.zeros(tuple(lead) + tuple(sizes), dtype=bool)
    else:
        got = a[(Ellipsis,) + tuple(clipped)]
    return got & ok, ok


def write(arr: np.ndarray, box, rows, sizes) -> np.ndarray:
    """Scatter the trailing dims of ``arr`` (broadcast to ``box``) through the map into new
    trailing dims ``sizes``; unwritten positions False."""
    r = len(box)
    lead = arr.shape[:arr.ndim - r]
    a = np.broadcast_to(arr, tuple(lead) + tuple(box))
    out = np.zeros(tuple(lead) + tuple(sizes), dtype=bool)
    idx = positions(rows, box)
    ok = np.ones(tuple(box), dtype=bool)
    for c, n in zip(idx, sizes, strict=False):
        ok = ok & (c >= 0) & (c < n)
    sel = [np.broadcast_to(c, tuple(box))[ok] for c in idx]
    out[(Ellipsis,) + tuple(sel)] = a[(Ellipsis,) + (ok,)] if r else a
    return out
