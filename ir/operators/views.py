"""Pure reindexings: gathers (contravariant) and scatters (covariant)."""
from __future__ import annotations

from dataclasses import dataclass

from .base import Operator


@dataclass(frozen=True, eq=False)
class View(Operator):
    """``out[i] = in[eta(i)]``: the Broadcasted's reindexing does the work."""


@dataclass(frozen=True, eq=False)
class CovariantView(Operator):
    """``out[r(i)] = in[i]`` through ``reindexing`` (a StrideMorphism); unwritten positions are
    dead; with no input the single empty position writes 1."""

    reindexing: object = None


@dataclass(frozen=True, eq=False)
class ConcatenateAxes(Operator):
    """Scatter each part onto its run of the whole axis (``out[off_k + j] = in_k[j]``)."""

    part_reindexings: tuple = ()


@dataclass(frozen=True, eq=False)
class DeconcatenateAxes(Operator):
    """Gather each part from its run of the whole axis (``out_k[j] = in[off_k + j]``)."""

    part_reindexings: tuple = ()
