"""Checks of the structural terms: composition joins, products, rearrangements, repeated
blocks, ParaWrap entries, truncation (docs/format.md §8, §10.3, §1.4).

Each check takes the :class:`~spec.validate.Checker` and one site; it never raises (the
checker turns unexpected typing errors into diagnostics).
"""
from __future__ import annotations

import sympy

from ncdc.ir.axes import Axis
from ncdc.ir.morphisms import (
    Block,
    Composed,
    Morphism,
    ParaWrap,
    ProductOfMorphisms,
    Rearrangement,
    ThreadedComposed,
    Truncated,
)
from ncdc.ir.shapes import axis_labels, compare_objects, objects_text

from .summary import CutBlock


def check_joins(ck, content: tuple, path: str, titles) -> None:
    """``cod(content[i]) == dom(content[i+1])`` position by position (docs/format.md §8.2). A join
    next to a truncated item, or next to an item that cannot be typed (reported where it is),
    is skipped. A wrong number of wires into or out of a product is ``product-arity``."""
    for i in range(len(content) - 1):
        left, right = content[i], content[i + 1]
        if not isinstance(left, Morphism) or not isinstance(right, Morphism):
            continue
        if isinstance(left, Truncated) or isinstance(right, Truncated):
            continue
        gives, takes = ck.typed(left, "cod"), ck.typed(right, "dom")
        if gives is None or takes is None:
            continue
        where = f"{path}.content[{i + 1}]"
        for prob in compare_objects(gives, takes):
            text = prob.describe(f"content[{i}]", f"content[{i + 1}]")
            if prob.kind == "leniency":
                ck.warning("datatype-leniency", f"composition join: {text}", where, titles,
                           prob.axes_involved())
            elif prob.kind == "arity" and (isinstance(left, ProductOfMorphisms)
                                           or isinstance(right, ProductOfMorphisms)):
                ck.error("product-arity", f"composition join: {text}; "
                         f"{_product_split(left, right, ck)}", where, titles,
                         prob.axes_involved())
            else:
                ck.error("compose-mismatch", f"composition join: {text}", where, titles,
                         prob.axes_involved())


def _product_split(left, right, ck) -> str:
    parts = []
    for side, m, attr in (("giving", left, "cod"), ("taking", right, "dom")):
        if isinstance(m, ProductOfMorphisms):
            sizes = [ck.typed(p, attr) for p in m.content]
            counts = " + ".join("?" if s is None else str(len(s)) for s in sizes) or "0"
            parts.append(f"the product {side} splits into parts of {counts} wire(s)")
    return "; ".join(parts)


def check_composed(ck, node: Composed, path: str, titles) -> None:
    if not node.content:
        ck.error("compose-mismatch", "a composition of no morphisms has no type", path, titles)
        return
    if isinstance(node, ThreadedComposed):
        check_routing(ck, node, path, titles)
        return
    check_joins(ck, node.content, path, titles)


def check_routing(ck, node: ThreadedComposed, path: str, titles) -> None:
    """Each step's operands against the pool entries its routing reads (the pool: the inputs,
    then every step's results), located at the step's own JSON path."""
    pool = list(node.dom)
    for i, (step, route) in enumerate(zip(node.steps, node.routing, strict=True)):
        if isinstance(step, Truncated):
            return
        takes, gives = ck.typed(step, "dom"), ck.typed(step, "cod")
        if takes is None or gives is None:
            return
        read = [pool[k] for k in route]
        for prob in compare_objects(read, takes):
            text = prob.describe(f"routing {list(route)}", f"step {i}")
            if prob.kind == "leniency":
                ck.warning("datatype-leniency", f"routing: {text}", f"{path}.content[{i}]",
                           titles, prob.axes_involved())
            else:
                ck.error("compose-mismatch", f"routing: {text}", f"{path}.content[{i}]",
                         titles, prob.axes_involved())
        pool.extend(gives)


def check_product(ck, node: ProductOfMorphisms, path: str, titles) -> None:
    """A product's parts must all live in one category (all index maps or all array maps)."""
    kinds = set()
    for part in node.content:
        dom = ck.typed(part, "dom")
        cod = ck.typed(part, "cod")
        for obj in (dom or ()) + (cod or ()):
            kinds.add("axis" if isinstance(obj, Axis) else "array")
    if len(kinds) > 1:
        ck.error("product-arity", "a product mixes index maps (axes) and array maps (arrays)",
                 path, titles)


def check_rearrangement(ck, node: Rearrangement, path: str, titles) -> None:
    """Every mapping entry indexes the domain (docs/format.md §7, §8.1)."""
    n = len(node.dom_)
    bad = [(j, m) for j, m in enumerate(node.mapping) if not 0 <= m < n]
    if bad:
        j, m = bad[0]
        more = f" ({len(bad) - 1} more)" if len(bad) > 1 else ""
        ck.error("rearrangement-bounds", f"mapping[{j}] = {m} is outside a domain of {n} "
                 f"{objects_text(node.dom_)}{more}", path + ".mapping", titles,
                 axis_labels(node.dom_))


def check_block(ck, node: Block, path: str, titles) -> None:
    """A repeated block feeds its outputs back as inputs: dom must equal cod (docs/format.md §8.4)."""
    rep = node.tag.repetition
    if isinstance(rep, sympy.Integer) and int(rep) < 1:
        ck.error("block-repetition", f"block {node.title!r} repeats {int(rep)} times",
                 path, titles)
        return
    if isinstance(rep, sympy.Integer) and int(rep) == 1:
        return
    dom, cod = ck.typed(node, "dom"), ck.typed(node, "cod")
    if dom is None or cod is None:
        return
    # pyncd runs a repeated block the same way: n copies of the body in sequence, each fed the
    # outputs of the one before (william-macready/pyncd torch_compile/torch_compile.py,
    # ConstructedBlock), so a body taking more inputs than it returns cannot repeat there
    # either (docs/exports.md, the transformer payload).
    for prob in compare_objects(cod, dom):
        if prob.is_error:
            short = len(cod) < len(dom)
            why = (f"; repeated, the copies after the first would lack {len(dom) - len(cod)} "
                   "of their inputs (each copy is fed the outputs of the one before)"
                   if short else "")
            ck.error("block-repetition", f"block {node.title!r} repeats "
                     f"{sympy.sstr(rep)} times but its codomain {objects_text(cod)} is not its "
                     f"domain {objects_text(dom)}{why}", path, titles, prob.axes_involved())
            return


def check_parawrap(ck, node: ParaWrap, path: str, titles) -> None:
    """One grab entry per body operand, one drop entry per body result (docs/format.md §10.3)."""
    for attr, entries, name in (("dom", node.grabs, "grabs"), ("cod", node.drops, "drops")):
        objs = ck.typed(node.body, attr)
        if objs is None:
            continue
        if len(objs) != len(entries):
            what = "operands" if attr == "dom" else "results"
            ck.error("parawrap-entries", f"{len(entries)} {name} entries for a body with "
                     f"{len(objs)} {what} {objects_text(objs)}", f"{path}.{name}", titles,
                     axis_labels(objs))


def check_truncated(ck, node: Truncated, path: str, titles, cut: CutBlock | None) -> None:
    """One diagnostic per cut term (a warning for a block, info otherwise); the complete items
    of a cut composition are still joined."""
    kept = "fields kept: " + (", ".join(node.partial) or "none")
    kind = node.expected or "term"
    if node.expected == "Block":
        detail = cut.describe() if cut is not None else f"block at {path}"
        ck.warning("truncated", f"{detail}; {kept}", path, titles[:-1])
    else:
        ck.info("truncated", f"{kind} cut off by the end of the file; {kept}", path,
                titles)
    content = node.partial.get("content")
    if node.expected == "Composed" and isinstance(content, tuple):
        check_joins(ck, content, path, titles)


__all__ = ["check_block", "check_composed", "check_joins", "check_parawrap", "check_product",
           "check_rearrangement", "check_truncated"]
