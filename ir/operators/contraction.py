"""Contractions: einsum-like products, held weights, table lookups."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..arrays import Weave
from ..axes import Axis
from ..datatypes import Natural, kind, strip
from ..errors import BindingError, SpecError
from ..frozen import quick_init
from .base import Operator, need_weaves
from .measure import ZERO, has_complex, prod, target_work, work


@quick_init
@dataclass(frozen=True, eq=False)
class Einops(Operator):
    """``out = sum over groups of prod_k in_k``; ``signature[k]`` gives one group number per
    target position of input k; every group is summed; the one output is all degree."""

    signature: tuple[tuple[int, ...], ...] = ()

    glyph = "Σ einsum"
    family = "contraction"

    def check(self, site):
        """One all-TILED output; one signature entry per operand, one group per target axis;
        the axes of one group have one size (``einops-group``)."""
        b = site.b
        if not site.arity(n_out=1):
            return
        site.rank("output", 0, 0, "only TILED slots")
        if len(self.signature) != len(b.input_weaves):
            site.error("operator-arity", f"Einops signature has {len(self.signature)} entries "
                       f"for {len(b.input_weaves)} operand(s)", ".operator.signature")
            return
        good = True
        for k, entry in enumerate(self.signature):
            t = b.input_weaves[k].target
            if len(entry) != len(t):
                site.error("operator-rank", f"Einops signature entry {k} names {len(entry)} "
                           f"group(s) but input {k} has {len(t)} target axis/axes "
                           f"[{', '.join(a.label for a in t)}]", f".operator.signature[{k}]",
                           tuple(a.label for a in t))
                good = False
        if good:
            _group_sizes(site, self.signature)

    def flops(self, b):
        """With summed groups ``n`` per term over ``n`` operands (``n - 1`` products and one
        accumulation: ``2 * MACs`` for two), without groups ``n - 1`` per element."""
        mul, add = (6, 2) if has_complex(b) else (1, 1)
        groups: dict[int, Axis] = {}
        for w, sig in zip(b.input_weaves, self.signature, strict=False):
            for g, a in zip(sig, w.target, strict=False):
                groups.setdefault(g, a)
        n = len(b.input_weaves)
        if groups:
            return prod(work(a) for a in groups.values()) * ((n - 1) * mul + add)
        return sympy.Integer(max(n - 1, 0) * mul)


def _group_sizes(site, sig) -> None:
    groups: dict[int, list[Axis]] = {}
    for k, entry in enumerate(sig):
        for g, axis in zip(entry, site.b.input_weaves[k].target, strict=True):
            groups.setdefault(g, []).append(axis)
    for g, axes in sorted(groups.items()):
        first = axes[0]
        for other in axes[1:]:
            if other.uid == first.uid or other.size == first.size:
                continue
            differ = None
            if site.env is not None:
                try:
                    differ = site.env.size(first.size) != site.env.size(other.size)
                except BindingError:
                    differ = None
            if differ is None:
                d = sympy.simplify(first.size - other.size)
                differ = bool(d.is_number and d != 0)
            if differ:
                site.error("einops-group", f"Einops group {g} joins axes of different sizes: "
                           f"{first.label} ({sympy.sstr(first.size)}) and {other.label} "
                           f"({sympy.sstr(other.size)})", ".operator.signature",
                           (first.label, other.label))
                return


@quick_init
@dataclass(frozen=True, eq=False)
class Linear(Operator):
    """``y[o] = sum_in x_1[in_1] ... x_n[in_n] W[in_1, ..., in_n, o] (+ b[o])``: the weight
    holds every input's target axes, in input order, then the output's; with no input the
    output is ``W`` itself."""

    bias: bool = False

    glyph = "linear"
    family = "contraction"
    roles = ("weight", "bias")

    def check(self, site):
        """Any number of operands, one result."""
        site.arity(n_out=1)

    def flops(self, b):
        """``2 * in * out`` (``+ out`` for a bias); an expert/group bank (an output axis that
        repeats a degree axis, kept by the ``View<diag>`` that follows) counts one slab per
        degree index; without an input it is a held array (0)."""
        if not b.input_weaves:
            return ZERO
        bank = set(bank_axes(b))
        inner = prod(target_work(w) for w in b.input_weaves)
        outer = prod(work(a) for a in b.output_weaves[0].target if a not in bank)
        return 2 * inner * outer + (outer if self.bias else ZERO)

    def param_arrays(self, b):
        """``weight [in targets..., out target...]``, ``bias [out target]``."""
        need_weaves(self, b, need_in=False)
        w_axes = []
        for w in b.input_weaves:
            if isinstance(strip(w.datatype), Natural):
                raise SpecError("a Linear with a natural (selecting) input is not supported",
                                b.path, node_type="Linear")
            w_axes.extend(w.target)
        outw: Weave = b.output_weaves[0]
        w_axes.extend(outw.target)
        out = [("weight", tuple(a.size for a in w_axes), tuple(a.label for a in w_axes),
                outw.datatype, True)]
        if self.bias:
            out.append(("bias", tuple(a.size for a in outw.target),
                        tuple(a.label for a in outw.target), outw.datatype, True))
        return out


def bank_axes(b) -> tuple[Axis, ...]:
    """Output axes of a ``Linear`` that repeat a degree axis (an expert or group bank)."""
    if not isinstance(b.operator, Linear) or not b.input_weaves or not b.output_weaves:
        return ()
    deg = b.degree
    return tuple(a for a in b.output_weaves[0].target if a in deg)



@quick_init
@dataclass(frozen=True, eq=False)
class Embedding(Operator):
    """``out[o] = T[idx, o]`` for a rank-0 natural index below the input's bound."""

    glyph = "embed"
    family = "contraction"
    roles = ("table",)

    def check(self, site):
        """One rank-0 natural index, one result."""
        if site.arity(n_in=1, n_out=1) and site.rank("input", 0, 0, "a rank-0 index"):
            site.kind_is(0, "natural")

    def flops(self, b):
        """A lookup moves data: 0."""
        return ZERO

    def param_arrays(self, b):
        """``table [index bound, out target...]`` (learned unless it holds naturals)."""
        need_weaves(self, b)
        dt = strip(b.input_weaves[0].datatype)
        if not isinstance(dt, Natural):
            raise SpecError("an Embedding's input must be a natural index", b.path,
                            node_type="Embedding")
        outw = b.output_weaves[0]
        return [("table", (dt.max_value,) + tuple(a.size for a in outw.target),
                 ("index",) + tuple(a.label for a in outw.target), outw.datatype,
                 kind(outw.datatype) != "natural")]


__all__ = ["Einops", "Embedding", "Linear"]
