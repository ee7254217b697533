"""What the generator knows about a value while it writes code for it."""
from __future__ import annotations

from dataclasses import dataclass, field

from ir.arrays import Array

from .liveness import StaticLive


@dataclass
class Wire:
    """A value of the morphism being lowered: a Python atom (usually a local name) holding a
    tensor whose trailing dims are ``array``'s axes, in order.

    ``live`` is the code of a bool mask broadcastable to it (None: every position is live);
    ``static`` the generator's knowledge of which positions can be dead (None iff ``live`` is
    None). ``full`` says the tensor carries the function's leading (batch) dims; values built
    from nothing (parameters, tables) do not and broadcast instead. Dead positions always hold
    0."""

    var: str
    array: Array
    live: str | None = None
    static: StaticLive | None = None
    full: bool = True
    slot: int | None = field(default=None, compare=False)

    @property
    def rank(self) -> int:
        return len(self.array.shape)
