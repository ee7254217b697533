"""How the interpreter carries an array: ``Value(values, live)``.

``values`` is a numpy array: float64 for reals, int64 for naturals, complex128 for complex
numbers (also in emulate mode — rounding changes the numbers, not the storage). ``live`` is a
bool array or ``None`` (= every position live), docs/format.md §2.4.

Internal conventions (the public API always hands out full, contiguous arrays):

* **dead positions hold 0** in ``values`` — every rule keeps this invariant, so sums and
  contractions may run over dead terms unchanged;
* ``values`` and ``live`` have the **same rank** as the logical array, and each of their
  dimensions is either the logical size or 1 (broadcast: the data is constant along it). Views
  with zero or negative strides are allowed and never written to.

Liveness rules (docs/format.md §2.4), all expressed with the helpers of this module:

=====================================================  ========================================
operation                                              result liveness
=====================================================  ========================================
gather through a reindexing (``reindex.gather``)       out of range -> dead, else the source's
covariant scatter (``reindex.scatter``)                unwritten -> dead, else the source's
unary pointwise (Arithmetic, TypeConvert, Cast, ...)   the operand's
product-like (Einops without groups, Select, Modulo)   :func:`land` of the operands
``AdditionOp``                                         :func:`lor` of the operands (dead = 0)
fold over target axes (contractions, Linear, max,      :func:`any_over` the folded axes (dead
xor, the sums/means of the normalisations, TopK rank)  only if every term is)
nullary sources                                        all live
=====================================================  ========================================
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ncdc.ir.datatypes import Datatype, kind
from ncdc.ir.errors import EvaluationError

from .weights import available_bytes


class Value(NamedTuple):
    """An array and its liveness mask (``None`` = all live)."""

    values: np.ndarray
    live: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape


DTYPES = {"real": np.float64, "natural": np.int64, "complex": np.complex128}


def dtype_of(dt: Datatype):
    """The numpy storage dtype of a datatype's kind."""
    return DTYPES[kind(dt)]


def land(*masks):
    """AND of broadcastable masks; ``None`` operands are all-true."""
    out = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else np.logical_and(out, m)
    return out


def lor(*masks):
    """OR of broadcastable masks; any ``None`` operand makes the result all-true."""
    out = None
    for m in masks:
        if m is None:
            return None
        out = m if out is None else np.logical_or(out, m)
    return out


def zero_dead(values: np.ndarray, live) -> np.ndarray:
    """``values`` with dead positions set to 0 (selection, never multiplication: §16 item 3)."""
    if live is None:
        return values
    return np.where(live, values, np.zeros((), dtype=values.dtype))


def finished(values: np.ndarray, live) -> Value:
    """A rule result: dead positions zeroed, an all-true mask dropped."""
    if live is not None:
        live = np.asarray(live, dtype=bool)
        if live.all():
            live = None
    return Value(zero_dead(values, live), live)


def any_over(mask, axes: tuple[int, ...]):
    """Whether any position along ``axes`` is live (``keepdims``); ``None`` stays ``None``."""
    if mask is None or not axes:
        return mask
    return np.any(mask, axis=axes, keepdims=True)


def live_count(mask, axes: tuple[int, ...], logical: tuple[int, ...]):
    """Number of live positions along ``axes`` (``keepdims``), counting a broadcast (size-1)
    dimension of ``mask`` at its logical size. ``logical`` holds the logical sizes of ``axes``."""
    if mask is None:
        return int(np.prod(logical, dtype=np.int64))
    factor = 1
    for ax, n in zip(axes, logical, strict=False):
        if mask.shape[ax] == 1:
            factor *= n
    return np.sum(mask, axis=axes, keepdims=True, dtype=np.int64) * factor


def with_rank(arr: np.ndarray, rank: int) -> np.ndarray:
    """Prepend size-1 dimensions up to ``rank``."""
    if arr.ndim == rank:
        return arr
    if arr.ndim > rank:
        raise ValueError(f"array of rank {arr.ndim} where rank {rank} was expected")
    return arr.reshape((1,) * (rank - arr.ndim) + arr.shape)


def materialise(v: Value, shape: tuple[int, ...]) -> Value:
    """A full-shape, contiguous, writeable copy (for results handed to callers)."""
    vals = np.array(np.broadcast_to(v.values, shape), order="C")
    live = None if v.live is None else np.array(np.broadcast_to(v.live, shape), order="C")
    if live is not None and live.all():
        live = None
    return Value(vals, live)


def as_kind(values: np.ndarray, dt: Datatype) -> np.ndarray:
    """``values`` stored in the dtype of ``dt``'s kind (naturals must be integral)."""
    want = dtype_of(dt)
    if values.dtype == want:
        return values
    if want is np.int64 and not np.issubdtype(values.dtype, np.integer):
        if np.iscomplexobj(values):
            raise ValueError("complex values cannot become naturals")
        r = np.rint(values)
        if not np.array_equal(r, values):
            raise ValueError("non-integral values cannot become naturals")
        return r.astype(np.int64)
    if want is np.float64 and np.iscomplexobj(values):
        if np.any(values.imag != 0):
            raise ValueError("complex values with an imaginary part cannot become reals")
        return values.real.astype(np.float64)
    return values.astype(want)


def check_allocation(shape, what: str, itemsize: int = 8) -> None:
    """Refuse (:class:`~ir.errors.EvaluationError`) to allocate an array of ``shape`` that
    would not fit in the memory available, naming it — before numpy tries and fails with a
    ``MemoryError``. The cost model's preflight estimates whole runs; this guards each site."""
    need = math.prod(int(n) for n in shape) * itemsize
    if need > (1 << 28) and need > available_bytes():
        raise EvaluationError(f"{what}: an array of shape {tuple(shape)} needs {need:,} bytes, "
                              f"more than the {available_bytes():,} available (use smaller "
                              "sizes or fewer tokens)")
