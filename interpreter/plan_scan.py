"""The steps of a ``Scan`` in a compiled plan (:mod:`interpreter.plan`): the traversal runs
``base`` once and ``step`` once per position of the recurrence axis
(:meth:`ir.traverse.Visitor.scan`); these steps slice the per-step inputs at that position and
stack the states ``H_0 .. H_n`` into the history, along the last axis (liveness alike); each
iteration of the step is one occurrence of its parameters."""
from __future__ import annotations

import numpy as np

from .plan_steps import boxed
from .values import Value


def same_occurrence(b, node, step: int) -> None:
    """Every iteration of a scan's step reads the parameters of its first: the occurrence
    counts (:meth:`plan_steps.SiteSteps.take_keys`) are put back to where they stood before
    it."""
    if step == 0:
        b.scan_counts[id(node)] = dict(b.counts)
    else:
        b.counts = dict(b.scan_counts[id(node)])


def _at(a: np.ndarray, i: int, dim: int) -> np.ndarray:
    """``a`` at index ``i`` of dim ``dim`` (counted from the end); a broadcast (size 1) dim
    holds the same value at every step."""
    return np.take(a, i if a.shape[dim] > 1 else 0, axis=dim)


def slice_at(b, reg: int, i: int, dim: int = -1) -> int:
    """A register holding input ``reg`` at position ``i`` of its recurrence axis, dim ``dim``
    of the value counted from the end."""
    (dst,) = b.new()

    def run(R):
        v = boxed(R[reg])
        R[dst] = Value(_at(np.asarray(v.values), i, dim),
                       None if v.live is None else _at(v.live, i, dim))

    b.step(run, (reg,), (dst,))
    return dst


def stack(b, regs: list[int]) -> int:
    """A register holding the states of ``regs`` stacked along a new last axis."""
    (dst,) = b.new()
    src = tuple(regs)

    def run(R):
        vs = [boxed(R[r]) for r in src]
        vals = np.stack(np.broadcast_arrays(*[np.asarray(v.values) for v in vs]), axis=-1)
        live = None
        if any(v.live is not None for v in vs):
            shape = vals.shape[:-1]
            live = np.stack([np.ones(shape, bool) if v.live is None
                             else np.broadcast_to(v.live, shape) for v in vs], axis=-1)
        R[dst] = Value(np.ascontiguousarray(vals), live)

    b.step(run, src, (dst,))
    return dst
