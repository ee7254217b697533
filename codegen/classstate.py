"""The named parts of a class being written (:class:`codegen.lower.ClassBuilder` holds one of
each, beside its members, sizes, statement list and tape): its interface, what its constructor and
forward must take, its batch shape and the selections of sparse axes it has met."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Interface:
    """What the class shows its caller: title and docs, forward's inputs with their masks, and in
    pairs mode the pairs argument (``selection``), the flag "none was passed" (``all_pairs``) and
    the code of the sparse axis's length (``pairs_size``)."""

    title: str
    description: str | None = None
    formula: str | None = None
    inputs: list = field(default_factory=list)  # Wires
    input_masks: list = field(default_factory=list)  # per input: its mask argument or None
    optional_masks: bool = False  # root class: masks keyword-only, None = all live
    selection: object | None = None  # codegen.pairs.Selection
    all_pairs: str | None = None
    pairs_size: str = ""
    tables: list = field(default_factory=list)  # (keys, sites, argument names, base): passed in


@dataclass
class Needs:
    """What the class's constructor and forward take, for itself or for a submodule: the
    ``quant`` switch (it rounds), ``static_shapes`` (it makes a selection's pairs), ``stand_in``
    (it holds user data, ``user_data``: their titles) and the ``tape``."""

    quant: bool = False
    passes_quant: bool = False
    static: bool = False
    passes_static: bool = False
    user_data: list = field(default_factory=list)
    passes_stand_in: bool = False
    tape: bool = False


@dataclass
class Batch:
    """The forward's leading (batch) shape: read off ``source`` (input variable, its array rank),
    bound as ``lead`` only where some statement ``used`` it."""

    source: tuple[str, int] | None = None
    used: bool = False

    def lead(self) -> str | None:
        """The local holding the batch shape (now marked used), or None in a nullary class."""
        if self.source is None:
            return None
        self.used = True
        return "lead"


@dataclass
class PairsState:
    """Sparse axes met while lowering (codegen/pairs.py): the first wire carrying each one's
    data-dependent selection (``masks``), the pairs made of them here (``selections``), and the
    call sites, counted, of which ``excluded`` stay dense."""

    masks: dict = field(default_factory=dict)  # sparse axis uid -> Wire
    selections: dict = field(default_factory=dict)  # sparse axis uid -> Selection
    excluded: frozenset = frozenset()
    call_sites: int = 0
