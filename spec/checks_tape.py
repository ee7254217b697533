"""Tape balance (docs/format.md §10): every read of a slot needs a write of it earlier in
evaluation order.

Evaluation order: a composition left to right, a product part by part, a block's body (once: a
repeated block's later iterations could see its own writes, which this check does not credit),
a box's block where the box is, and a ``ParaWrap`` as "grabs ; body ; drops" — its grab entries
read before its body runs, its drop entries write after. Free-standing ``Grab``/``Drop`` terms
read/write where they are. The ``grabs``/``drops`` of a ``ParaBlockOperator`` only describe its
ports (the ``ParaWrap`` around it does the reading and writing) and are not counted.

A read with no earlier write is a ``tape-unbalanced`` warning: evaluation would find the slot
empty. A cut (truncated) term stops nothing: the terms kept before the cut still count.
"""
from __future__ import annotations

from ncdc.ir.morphisms import CoupledScan, Scan, Truncated
from ncdc.ir.traverse import Descend, Visitor, traverse
from ncdc.ir.walk import arity

from .checks_sites import all_sites


class _TapeOrder(Visitor):
    """Wire values are placeholders (``None``); what is recorded is each tape access."""

    def __init__(self):
        self.events: list = []

    def operator(self, node, ins, scope):
        return [None] * len(node.output_weaves)

    def box(self, node, ins, scope):
        return Descend(((".operator.block", node.operator.block),), ins,
                       then=lambda _: [None] * len(node.output_weaves))

    def rearrange(self, node, ins, scope):
        return [None] * len(node.mapping)

    def repetitions(self, block, scope) -> int:
        return 1

    def grab(self, slot, array, scope):
        self.events.append(("grab", slot, scope.path, scope.titles))

    def drop(self, slot, value, array, scope) -> None:
        self.events.append(("drop", slot, scope.path, scope.titles))

    def truncated(self, node: Truncated, ins, scope):
        title = "(truncated block)" if node.expected == "Block" else None
        return Descend(node.children(), ins, title=title, then=lambda _: [])

    def stride(self, node, ins, scope):
        return []

    def unknown(self, node, ins, scope):
        return []


def tape_events(root, root_path: str | None = None):
    """``(kind, slot, path, titles)`` with kind ``grab``/``drop``, in evaluation order."""
    order = _TapeOrder()
    traverse(root, [None] * arity(root), order, root_path)
    return order.events


def _broken_scan(ck, root, root_path) -> bool:
    """Whether an error has been reported at or inside a Scan of ``root``."""
    bad = [d.json_path for d in ck.out if d.severity == "error"]
    if not bad:
        return False
    scans = [s.path for s in all_sites(root, root_path)
             if isinstance(s.node, (Scan, CoupledScan))]
    return any(p == s or p.startswith((s + ".", s + "[")) for p in bad for s in scans)


def check_tape(ck, root, root_path: str | None = None) -> None:
    """``tape-unbalanced`` for a Grab no earlier Drop wrote, in evaluation order. A Scan whose
    base or step has an error reported inside it has no evaluation order (its state may be
    missing), so a term holding one is not followed."""
    if _broken_scan(ck, root, root_path):
        return
    written: set[int] = set()
    reported: set[int] = set()
    for kind, slot, path, titles in tape_events(root, root_path):
        if kind == "drop":
            written.add(slot.uid)
        elif slot.uid not in written and slot.uid not in reported:
            reported.add(slot.uid)
            ck.warning("tape-unbalanced", f"tape slot {slot.label} is read (Grab) before any "
                       "Drop writes it; evaluation would find it empty", path, titles)


__all__ = ["check_tape", "tape_events"]
