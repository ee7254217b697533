"""What the generator knows about a value while it writes code for it."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ncdc.ir.arrays import Array

from .liveness import StaticLive


@dataclass
class Wire:
    """A value of the morphism being lowered: a Python atom (usually a local name) holding a
    tensor whose trailing dims are ``array``'s axes, in order.

    ``live`` is the code of a bool mask broadcastable to it (None: every position is live);
    ``static`` the generator's knowledge of which positions can be dead (None iff ``live`` is
    None). ``full`` says the tensor carries the function's leading (batch) dims; values built
    from nothing (parameters, tables) do not and broadcast instead. Dead positions always hold
    0.

    ``pairs`` (a :class:`codegen.pairs.Selection`) marks a *pairs array*: the value of an array
    whose first axis is that selection's sparse axis, held only at the selection's live
    (row, slot) pairs as ``[pairs, *other axes]`` with no leading dims (``codegen/pairs.py``);
    ``origins`` are the call sites it comes from (``ARGUMENT``: the class's own pairs
    argument).

    ``flipped`` names the dims (positions in ``array.shape``) held in reverse order: position
    ``n - 1 - i`` of the tensor holds index ``i`` (a window read backwards kept as a view,
    ``codegen/flips.py``); ``live`` and ``static`` are laid out like the tensor.

    ``imag`` names the imaginary part of a complex value held as two real tensors (``var`` the
    real part; ``codegen/complex_parts.py``).

    ``dead`` is the code of what dead positions hold where not 0: ``-math.inf`` for the scores
    a softmax shift leaves to a pointwise map that takes -inf to 0 (``e^x``; see
    :func:`zeroed`), which then needs no re-zeroing ``where``."""

    var: str
    array: Array
    live: str | None = None
    static: StaticLive | None = None
    full: bool = True
    slot: int | None = field(default=None, compare=False)
    pairs: object | None = field(default=None, compare=False)
    origins: frozenset = field(default=frozenset(), compare=False)
    flipped: tuple = ()
    imag: str | None = field(default=None, compare=False)  # codegen/complex_parts.py
    dead: str = "0"

    @property
    def rank(self) -> int:
        return len(self.array.shape)


def zeroed(fw, w: Wire) -> Wire:
    """``w`` with 0 at its dead positions: every consumer but a map taking ``w.dead`` to 0
    reads a wire so (``codegen.broadcast``, ``codegen.lower``)."""
    if w.dead == "0" or w.live is None:
        return w if w.dead == "0" else dataclasses.replace(w, dead="0")
    var = fw.bind(w.var if w.var.isidentifier() else "value",
                  f"torch.where({w.live}, {w.var}, 0)")
    return dataclasses.replace(w, var=var, dead="0", slot=None)
