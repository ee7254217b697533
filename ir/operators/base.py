"""Base class of operators (what a ``Broadcasted`` computes on its target arrays).

Each operator class is its own descriptor: besides its fields it states

* ``glyph``: a short label by meaning (``+``, ``Σ einsum``, ``RMSNorm``, ``top-k``) and
  ``family``: what kind of node a picture draws (one of :data:`FAMILIES`);
* ``check(site)``: its arity, rank and datatype rules, reported on an
  :class:`~ir.operators.site.Site` (``spec.checks_broadcast`` calls it for every site);
* ``flops(b)``: FLOPs of one degree index of a ``Broadcasted`` ``b`` applying it
  (:mod:`ir.cost` multiplies by the degree);
* ``roles`` and ``param_arrays(b)``: the arrays it holds (learned weights, fixed tables),
  which :func:`ir.params.param_roles` lists.

A class that leaves ``glyph``, ``family``, ``check`` or ``flops`` to this base is incomplete:
:func:`missing_pieces` names what it lacks, and ``ir.operators`` refuses to import with an
incomplete family class. The backends' rules (numpy, torch) and the JSON decoders are kept by
class in their own registries, since ``ir`` depends on neither.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from ..errors import SpecError
from ..frozen import quick_init
from ..names import Name

if TYPE_CHECKING:
    import sympy

    from .site import Site

FAMILIES = ("contraction", "elementwise", "cast", "fold", "norm", "topk", "source", "view",
            "box")
"""What a picture draws for an operator."""


@quick_init
@dataclass(frozen=True, eq=False)
class Operator:
    """Every operator has a display name (never read by the semantics) and its JSON path."""

    name: Name | None = None
    path: str = field(default="", compare=False, repr=False, kw_only=True)

    glyph: ClassVar[str] = ""
    family: ClassVar[str] = ""
    roles: ClassVar[tuple[str, ...]] = ()
    """Parameter roles ``param_arrays`` may give (``weight``, ``bias``, ``gain``, ...)."""

    @property
    def label(self) -> str:
        return self.name.text if self.name is not None else ""

    @property
    def kind(self) -> str:
        return type(self).__name__

    @property
    def shown(self) -> str:
        """The label a picture gives this operator: its class's ``glyph`` unless a field
        says more (a subclass refines it)."""
        return type(self).glyph

    def check(self, site: Site) -> None:
        """Report what is wrong with this operator at ``site`` (every operator says)."""
        raise NotImplementedError(f"{type(self).__name__} states no validation rule")

    def flops(self, b) -> sympy.Expr:
        """FLOPs of one degree index of ``b`` (every operator says)."""
        raise NotImplementedError(f"{type(self).__name__} states no FLOP rule")

    def param_arrays(self, b) -> list:
        """``(role, shape, axis labels, datatype, learned)`` per array held at ``b``."""
        return []


def need_weaves(op: Operator, b, need_in: bool = True, need_out: bool = True) -> None:
    """Refuse (``SpecError``) a site lacking the input or output weave its arrays are shaped
    by."""
    if (need_in and not b.input_weaves) or (need_out and not b.output_weaves):
        raise SpecError(f"a {type(op).__name__} needs an input and an output weave "
                        f"(has {len(b.input_weaves)} and {len(b.output_weaves)})",
                        b.path, node_type=type(op).__name__)


def missing_pieces(cls: type[Operator]) -> list[str]:
    """The descriptor entries ``cls`` leaves to :class:`Operator` (empty when complete)."""
    out = [a for a in ("glyph", "family") if not getattr(cls, a)]
    if cls.family and cls.family not in FAMILIES:
        out.append(f"family {cls.family!r} (not one of {FAMILIES})")
    out += [m for m in ("check", "flops") if getattr(cls, m) is getattr(Operator, m)]
    return out


__all__ = ["FAMILIES", "Operator", "missing_pieces", "need_weaves"]
