"""Operators that box a whole block (applied at every degree index)."""
from __future__ import annotations

from dataclasses import dataclass

from ..frozen import quick_init
from ..shapes import axis_labels, compare_objects, objects_text
from .base import Operator
from .measure import ZERO


@quick_init
@dataclass(frozen=True, eq=False)
class BlockOperator(Operator):
    """Apply ``block`` lifted over the Broadcasted's degree."""

    block: object = None

    glyph = "box"
    family = "box"

    def check(self, site):
        """The weave targets are the block's dom and cod (docs/format.md §10.4)."""
        ports(site, site.typed(self.block, "dom"), site.typed(self.block, "cod"))

    def flops(self, b):
        """0 here: :mod:`ir.cost` counts the body."""
        return ZERO


@quick_init
@dataclass(frozen=True, eq=False)
class ParaBlockOperator(Operator):
    """A BlockOperator whose block holds tape seeds exposed as ports: inputs are one per grab
    first, then the block's operands; outputs are the block's results, then one per drop."""

    block: object = None
    grabs: tuple = ()
    drops: tuple = ()

    glyph = "box"
    family = "box"

    def check(self, site):
        """Ports: one input per grab, then the block's dom; its cod, then one per drop
        (docs/format.md §10.5)."""
        dom, cod = site.typed(self.block, "dom"), site.typed(self.block, "cod")
        if dom is not None:
            dom = tuple(g.size for g in self.grabs) + tuple(dom)
        if cod is not None:
            cod = tuple(cod) + tuple(d.size for d in self.drops)
        ports(site, dom, cod)

    def flops(self, b):
        """0 here: :mod:`ir.cost` counts the body."""
        return ZERO


def box_name(op) -> str:
    title = getattr(op.block, "title", None)
    label = op.label
    if title and label and label != title:
        return f"{label} ({title!r})"
    return repr(title or label or type(op).__name__)


def ports(site, dom, cod) -> None:
    """A box's weave targets against its block's ``dom``/``cod`` (docs/format.md §10.4, §2.5):
    ``box-arity``, ``box-port``, and ``datatype-leniency`` warnings."""
    b, what = site.b, f"box {box_name(site.op)}"
    for side, weaves, objs in (("input", b.input_weaves, dom), ("output", b.output_weaves, cod)):
        if objs is None:
            continue
        targets = [w.target_array() for w in weaves]
        field = f".{side}_weaves"
        if len(targets) != len(objs):
            site.error("box-arity", f"{what}: {len(targets)} {side} weave(s) "
                       f"{objects_text(targets)} but the block has {len(objs)} "
                       f"{objects_text(objs)}", field, axis_labels(tuple(targets) + tuple(objs)))
            continue
        for prob in compare_objects(objs, targets):
            where = f"{field}[{prob.position}]"
            if prob.kind == "leniency":
                site.warning("datatype-leniency", f"{what}: {side} port {prob.position}: the "
                             f"block says {prob.left} but the weave says {prob.right.datatype} "
                             "(equal after stripping quantisation, docs/format.md §2.5)", where,
                             prob.axes_involved())
            else:
                site.error("box-port", f"{what}: {side} port {prob.position}: the block has "
                           f"{prob.left} but the weave target is {prob.right}", where,
                           prob.axes_involved())


__all__ = ["BlockOperator", "ParaBlockOperator"]
