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

from ncdc.ir.morphisms import Block, Drop, Grab, ParaWrap, Truncated


def tape_events(root, root_path: str | None = None):
    """``(kind, slot, path, titles)`` with kind ``grab``/``drop``, in evaluation order."""
    start = root.path if root_path is None else root_path
    stack: list = [("node", root, start, ())]
    while stack:
        item = stack.pop()
        if item[0] == "event":
            yield item[1:]
            continue
        _, node, path, titles = item
        if isinstance(node, Block):
            titles = titles + (node.title,)
        elif isinstance(node, Truncated) and node.expected == "Block":
            titles = titles + ("(truncated block)",)
        if isinstance(node, Grab):
            yield ("grab", node.tape, path, titles)
            continue
        if isinstance(node, Drop):
            yield ("drop", node.tape, path, titles)
            continue
        later: list = []
        if isinstance(node, ParaWrap):
            for i, slot in enumerate(node.grabs):
                if slot is not None:
                    yield ("grab", slot, f"{path}.grabs[{i}]", titles)
            later = [("event", "drop", slot, f"{path}.drops[{i}]", titles)
                     for i, slot in enumerate(node.drops) if slot is not None]
        kids = [("node", child, path + step, titles) for step, child in node.children()]
        stack.extend(reversed(later))
        stack.extend(reversed(kids))


def check_tape(ck, root, root_path: str | None = None) -> None:
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
