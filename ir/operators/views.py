"""Pure reindexings: gathers (contravariant) and scatters (covariant)."""
from __future__ import annotations

from dataclasses import dataclass

from ..frozen import quick_init
from ..shapes import axis_labels, objects_text
from .base import Operator
from .measure import ZERO


class _Move(Operator):
    """Moves data only: 0 FLOPs."""

    def flops(self, b):
        return ZERO


@quick_init
@dataclass(frozen=True, eq=False)
class View(_Move):
    """``out[i] = in[eta(i)]``: the Broadcasted's reindexing does the work."""

    glyph = "view"
    family = "view"

    def check(self, site):
        """One operand, one result, every slot TILED."""
        if site.arity(n_in=1, n_out=1):
            site.all_tiled()


@quick_init
@dataclass(frozen=True, eq=False)
class CovariantView(_Move):
    """``out[r(i)] = in[i]`` through ``reindexing`` (a StrideMorphism); unwritten positions are
    dead; with no input the single empty position writes 1."""

    reindexing: object = None

    glyph = "view"
    family = "view"

    def check(self, site):
        """One result; the index map's codomain is the output target and the input target is
        a leading part of its domain (docs/format.md §11.14)."""
        if not site.arity(n_out=1):
            return
        b = site.b
        dom, cod = site.typed(self.reindexing, "dom"), site.typed(self.reindexing, "cod")
        if dom is None or cod is None:
            return
        out_t = b.output_weaves[0].target
        if tuple(a.uid for a in cod) != tuple(a.uid for a in out_t):
            site.error("operator-rank", f"CovariantView writes {objects_text(cod)} but the "
                       f"output target is [{', '.join(a.label for a in out_t)}]",
                       ".operator.reindexing", axis_labels(cod) + tuple(a.label for a in out_t))
        if b.input_weaves:
            in_t = b.input_weaves[0].target
            if tuple(a.uid for a in dom[:len(in_t)]) != tuple(a.uid for a in in_t):
                site.error("operator-rank", f"CovariantView reads {objects_text(dom)} but the "
                           f"input target is [{', '.join(a.label for a in in_t)}]",
                           ".operator.reindexing",
                           axis_labels(dom) + tuple(a.label for a in in_t))


@quick_init
@dataclass(frozen=True, eq=False)
class ConcatenateAxes(_Move):
    """Scatter each part onto its run of the whole axis (``out[off_k + j] = in_k[j]``)."""

    part_reindexings: tuple = ()

    glyph = "concat"
    family = "view"

    def check(self, site):
        """One operand per part, one result."""
        site.arity(n_in=len(self.part_reindexings), n_out=1)


@quick_init
@dataclass(frozen=True, eq=False)
class DeconcatenateAxes(_Move):
    """Gather each part from its run of the whole axis (``out_k[j] = in[off_k + j]``)."""

    part_reindexings: tuple = ()

    glyph = "split"
    family = "view"

    def check(self, site):
        """One operand, one result per part."""
        site.arity(n_in=1, n_out=len(self.part_reindexings))


__all__ = ["ConcatenateAxes", "CovariantView", "DeconcatenateAxes", "View"]
