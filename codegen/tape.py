"""Tape reads and writes (docs/format.md §10): a slot is a local or a ``tape[key]`` entry, with its
liveness mask where it can hold dead positions."""
from __future__ import annotations

from ncdc.ir.arrays import Array
from ncdc.ir.morphisms import ParaWrap
from ncdc.ir.tags import TapeSlot

from .classinfo import TapeEntry, shape_text
from .escapes import escape
from .names import comment_text
from .wires import Wire


def lower_parawrap(cb, pw: ParaWrap, wires: list[Wire]) -> list[Wire]:
    body_dom = list(pw.body.dom)
    it = iter(wires)
    operands = []
    for g, arr in zip(pw.grabs, body_dom, strict=True):
        operands.append(tape_read(cb, g, arr) if g is not None else next(it))
    results = cb.lower(pw.body, operands)
    out = []
    for r, d in zip(results, pw.drops, strict=True):
        if d is None:
            out.append(r)
        else:
            tape_write(cb, d, r)
    return out

def tape_read(cb, slot: TapeSlot, array: Array, bind: bool = True) -> Wire:
    """The value of a tape slot (a local, or the ``tape[...]`` lookup itself)."""
    cb.needs.tape = True
    key = cb.gen.slot_key(slot)
    entry = cb.tape.get(slot.uid)
    static = entry.static if entry is not None else None
    full = entry.full if entry is not None else True
    var, live = f"tape[{key!r}]", None
    if static is not None:
        live = f"tape[{key + '_live'!r}]"
    if bind:
        var = cb.fw.bind(key, var, f"tape slot {comment_text(slot.label, 30)}: "
                           + shape_text(array))
        if live is not None:
            live = cb.fw.bind(var + "_live", live)
    return Wire(var, array, live, static, full, slot=slot.uid)

def tape_write(cb, slot: TapeSlot, wire: Wire) -> None:
    if wire.pairs is not None:
        escape(wire.origins, "a pairs array written to the tape")
    cb.needs.tape = True
    key = cb.gen.slot_key(slot)
    if wire.slot == slot.uid and cb.tape.get(slot.uid) is not None:
        return
    cb.fw.assign(f"tape[{key!r}]", wire.var,
                 f"tape slot {comment_text(slot.label, 30)}: " + shape_text(wire.array))
    if wire.live is not None:
        cb.fw.assign(f"tape[{key + '_live'!r}]", wire.live)
    cb.tape[slot.uid] = TapeEntry(key, wire.array, wire.static, wire.full)
