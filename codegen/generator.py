"""State shared by every class of one generated file: the binding, the names of size symbols and
tape slots, the classes made so far (one per block body and input liveness)."""
from __future__ import annotations

import hashlib

from ncdc.ir.env import Env
from ncdc.ir.morphisms import Block, Broadcasted
from ncdc.ir.numeric import FreeNumeric
from ncdc.ir.operators import BlockOperator
from ncdc.ir.tags import TapeSlot

from .classinfo import ClassInfo
from .escapes import PairsEscape
from .fingerprint import structural_key
from .lower import ClassBuilder
from .names import (
    CONSTRUCTOR_ARGUMENTS,
    FORWARD_LOCALS,
    RESERVED_ATTRIBUTES,
    Namer,
    distinct_class_name,
    field_base,
    field_names,
    identifier,
)
from .wires import Wire


class Generator:
    """State shared by every class of one generated file."""

    def __init__(self, env: Env, data_symbols: set, quant: str, all_symbols: list,
                 size_names: dict | None = None):
        self.env = env
        self.size_names = dict(size_names or {})  # symbol -> readable name (k@L_{q})
        self.quant = quant
        self.data_symbols = set(data_symbols)
        ref_values = {s: 1 for s in self.data_symbols}
        self.ref_env = env.with_values(ref_values) if ref_values else env
        self.classes: dict[str, ClassInfo] = {}
        self.order: list[ClassInfo] = []
        self.prelude: set[str] = set()
        self.runtime: frozenset[str] = frozenset()  # features asked for (generate.RUNTIME)
        self.symbol_names = field_names(all_symbols, self.size_names)
        self.class_names = Namer(set(self.symbol_names.values()))
        self.config_name = "Config"  # the file's config dataclass, named with the root class
        self.sub_titles: dict[str, list[set[str]]] = {}  # title -> sub-block titles per class
        self.slot_keys: dict[int, str] = {}
        self._slot_namer = Namer()
        self._key_cache: dict = {}
        self.weight_formats = lambda site, role: None  # storage formats (codegen/storage.py)
        self.no_gradient: set[str] = set()  # keys of parameter sites no gradient reaches

    def sym_name(self, sym: FreeNumeric) -> str:
        """The symbol's config field name: ``config.<name>`` in ``__init__``,
        ``self.<name>`` in ``forward``."""
        if sym not in self.symbol_names:
            taken = Namer(set(self.symbol_names.values()) | RESERVED_ATTRIBUTES | FORWARD_LOCALS
                          | CONSTRUCTOR_ARGUMENTS | self.class_names.taken)
            self.symbol_names[sym] = taken.fresh(field_base(sym, self.size_names.get(sym)))
        return self.symbol_names[sym]

    def slot_key(self, slot: TapeSlot) -> str:
        if slot.uid not in self.slot_keys:
            self.slot_keys[slot.uid] = self._slot_namer.fresh(identifier(slot.label, "slot"))
        return self.slot_keys[slot.uid]

    def size(self, expr) -> int:
        return self.env.size(expr)

    def ref_size(self, expr) -> int:
        return self.ref_env.size(expr)

    def default_of(self, sym: FreeNumeric) -> str | None:
        if sym not in self.env:
            return None
        val = self.env.subs(sym)
        if val.is_Integer:
            return str(int(val))
        num = self.env.number(sym)
        return repr(float(num)) if not isinstance(num, complex) else repr(num)

    def key_of(self, m) -> str:
        return structural_key(m, self._key_cache)

    # -- classes ---------------------------------------------------------------------------
    def class_for(self, block: Block, inputs: list[Wire], tape: dict,
                  pairs_axis=None) -> ClassInfo:
        """The class of one block occurrence (one iteration of a repeated block); with
        ``pairs_axis``, its pairs-mode class (may raise :class:`codegen.pairs.NotCompact`)."""
        statics = tuple(w.static for w in inputs)
        key = self._class_key(block, statics, tape, pairs_axis)
        hit = self.classes.get(key)
        if hit is not None:
            return hit

        parts = sub_block_titles(block)

        def make(excluded):
            name = self.class_names.fresh(distinct_class_name(
                block.title, parts, self.sub_titles.get(block.title, []),
                self.class_names.taken), sep="")
            info = ClassInfo(key=key, name=name)
            builder = ClassBuilder(self, info, title=block.tag.title,
                                   description=block.tag.description, formula=block.tag.formula,
                                   excluded=excluded)
            builder.build(block.body, [w.array for w in inputs], list(statics), tape,
                          pairs_axis=pairs_axis)
            return info

        info = self.build_class(make)
        self.classes[key] = info
        self.order.append(info)
        self.sub_titles.setdefault(block.title, []).append(set(parts))
        return info

    def build_class(self, make):
        """``make(excluded)`` until no pairs array escapes: each :class:`PairsEscape` undoes
        the attempt and names the call sites to keep dense on the next one."""
        excluded: frozenset = frozenset()
        while True:
            saved = self.snapshot()
            try:
                return make(excluded)
            except PairsEscape as exc:
                self.restore(saved)
                if not exc.sites or exc.sites <= excluded:
                    raise AssertionError(f"internal: pairs escape without a new site ({exc})") from exc
                excluded = excluded | exc.sites

    def snapshot(self):
        """What building a class can change here (classes made, names taken, preludes)."""
        return (dict(self.classes), list(self.order), set(self.class_names.taken),
                set(self.prelude), dict(self.symbol_names), dict(self.slot_keys),
                set(self._slot_namer.taken), self.config_name)

    def restore(self, saved) -> None:
        (self.classes, self.order, self.class_names.taken, self.prelude, self.symbol_names,
         self.slot_keys, self._slot_namer.taken, self.config_name) = (
            dict(saved[0]), list(saved[1]), set(saved[2]), set(saved[3]), dict(saved[4]),
            dict(saved[5]), set(saved[6]), saved[7])

    def _class_key(self, block, statics, tape, pairs_axis=None) -> str:
        h = hashlib.sha256()
        h.update(self.key_of(block).encode())
        if pairs_axis is not None:
            h.update(f"|pairs:{pairs_axis.uid}".encode())
        for s in statics:
            h.update(b"|" + (s.digest().encode() if s is not None else b"-"))
        for uid in sorted(tape):
            e = tape[uid]
            h.update(f"|{uid}:{e.key}:{e.full}:".encode()
                     + (e.static.digest().encode() if e.static is not None else b"-"))
        return h.hexdigest()


def sub_block_titles(block) -> list[str]:
    """Titles of the blocks ``block``'s body applies directly, in body order."""
    out, stack = [], [block.body]
    while stack:
        m = stack.pop()
        if isinstance(m, Broadcasted) and isinstance(m.operator, BlockOperator):
            out.append(m.operator.block.title)
            continue
        stack.extend(reversed([c for _, c in m.children()]))
    return list(dict.fromkeys(out))
