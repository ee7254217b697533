"""Lowering of a block body to one ``nn.Module`` class (FORMAT.md §8, §10).

:class:`ClassBuilder` walks the body, keeps every value as a :class:`~codegen.wires.Wire`,
inlines one-operator blocks drawn in place (casts, elementwise maps, views) and calls a
submodule for every other block. The pieces it is made of live in their own modules: sizes
(:mod:`codegen.sizes`), members (:mod:`codegen.members`), block calls (:mod:`codegen.calls`),
the tape (:mod:`codegen.tape`), the class's text (:mod:`codegen.class_source`); operators are
lowered by :mod:`codegen.broadcast` through one rule each, which sees only a
:class:`codegen.ctx.Ctx`.
"""
from __future__ import annotations

from ncdc.ir.arrays import Array
from ncdc.ir.errors import SpecError, TruncatedError
from ncdc.ir.morphisms import (
    Block,
    Broadcasted,
    Composed,
    Drop,
    Grab,
    Morphism,
    ParaWrap,
    ProductOfMorphisms,
    Rearrangement,
    Truncated,
)
from ncdc.ir.numeric import FreeNumeric
from ncdc.ir.params import repetitions
from ncdc.ir.tags import BlockDrawing, TapeSlot

from . import calls, complex_parts, flips, tape
from .broadcast import fusible_view, lower_broadcasted
from .class_source import class_source
from .classinfo import INDENT, ClassInfo, Param, Sub, TapeEntry, shape_text
from .emit import FunctionWriter
from .escapes import NotCompact, escape
from .experts import expert_facts
from .members import Members
from .names import FORWARD_LOCALS, RESERVED_ATTRIBUTES, Namer, comment_text, identifier
from .pairs import Selection, is_selection_mask
from .sizes import SizeCodes
from .wires import Wire


class ClassBuilder:
    """Writes one ``nn.Module`` class for a block body."""

    def __init__(self, gen, info: ClassInfo, title: str, description: str | None,
                 formula: str | None, excluded: frozenset = frozenset()):
        self.gen = gen
        self.info = info
        self.title = title
        self.description = description
        self.formula = formula
        self.members = Members(RESERVED_ATTRIBUTES | set(gen.symbol_names.values()),
                               formats=gen.weight_formats)
        self.sizes = SizeCodes(gen)
        self.needs_quant = False  # this class rounds (emulate mode)
        self.passes_quant = False  # a submodule rounds
        self.needs_static = False  # this class makes a selection's pairs
        self.passes_static = False  # a submodule does
        self.user_data: list[str] = []  # titles of the user data this class holds
        self.passes_stand_in = False  # a submodule holds user data
        self.uses_tape = False
        self._unit: str | None = None
        self.lead_source: tuple[str, int] | None = None
        self.lead_used = False
        reserved = set(FORWARD_LOCALS)
        reserved |= {gen.symbol_names[s] for s in gen.data_symbols if s in gen.symbol_names}
        self.fw = FunctionWriter(INDENT * 2, reserved)
        self.inputs: list[Wire] = []
        self.sizes.inputs = self.inputs
        self.input_masks: list[str | None] = []
        self.optional_masks = False  # root class: masks keyword-only, None = all live
        self.tape: dict[int, TapeEntry] = {}
        # live pairs of sparse axes (codegen/pairs.py)
        self.selection: Selection | None = None  # pairs mode: the pairs argument
        self.all_pairs: str | None = None  # pairs mode: the flag "no pairs were passed"
        self._pairs_size = ""  # pairs mode: code of the sparse axis's length
        self.masks: dict[int, Wire] = {}  # sparse axis uid -> a wire carrying its selection
        self.selections: dict[int, Selection] = {}  # sparse axis uid -> pairs made here
        self.excluded_sites = frozenset(excluded)  # call sites kept dense
        self.call_sites = 0
        self.real_parts = False  # complex values held as real parts (codegen/complex_parts.py)

    # -- sizes (codegen/sizes.py) -----------------------------------------------------------
    def _fwd_symbol(self, sym: FreeNumeric) -> str:
        return self.sizes.fwd_symbol(sym)

    def _init_symbol(self, sym: FreeNumeric) -> str:
        return self.sizes.init_symbol(sym)

    def axis_size(self, axis) -> str:
        return self.sizes.axis(axis)

    @property
    def size_code(self):
        return self.sizes.fwd

    @property
    def init_size_code(self):
        return self.sizes.init

    def lead(self) -> str | None:
        """Name of the leading (batch) shape of this forward, or None in a nullary class."""
        if self.lead_source is None:
            return None
        self.lead_used = True
        return "lead"

    # -- members (codegen/members.py) -------------------------------------------------------
    def unit(self) -> str:
        """A float scalar 1 buffer (follows the module's dtype and device)."""
        if self._unit is None:
            self._unit = self.members.add_table("one", [], "torch.ones(())")
        return self._unit

    def stand_in_flag(self, title: str) -> str:
        """The flag saying user data may be stood in for (the class holds ``title``)."""
        self.user_data.append(title)
        return "self.stand_in"

    def quant_guard(self) -> str:
        self.needs_quant = True
        return "self.emulate"

    def held_code(self, var: str, encoding: str, channels: str | None = None) -> str:
        """Code rounding ``var`` to its storage ``encoding`` in emulate mode (MX blocks of
        ``channels``): the base class's ``self.held``, the identity in exact mode."""
        self.needs_quant = True
        return f"self.held({var}, {encoding!r}{', ' + channels if channels else ''})"

    # -- building ----------------------------------------------------------------------------
    # -- building ----------------------------------------------------------------------------
    def build(self, body: Morphism, dom: list[Array], statics: list, tape: dict,
              pairs_axis=None) -> None:
        """Write the class for ``body``; with ``pairs_axis`` (a sparse axis) in pairs mode:
        forward takes the axis's live pairs and returns the arrays on it as pairs arrays."""
        self.tape = dict(tape)
        arg_names = Namer(set(self.fw.names.taken))
        for k, (arr, st) in enumerate(zip(dom, statics)):
            base = identifier("_".join(a.label for a in arr.shape), "scalar") if arr.shape \
                else "scalar"
            var = arg_names.fresh(base)
            self.fw.names.reserve(var)
            live = None
            if st is not None:
                live = arg_names.fresh(var + "_live")
                self.fw.names.reserve(live)
            self.inputs.append(Wire(var, arr, live, st, True))
            self.input_masks.append(live)
        if self.inputs:
            first = self.inputs[0]
            self.lead_source = (first.var, first.rank)
        if pairs_axis is not None:
            if not self.inputs:
                raise NotCompact("a block without inputs has no rows")
            arg = arg_names.fresh(identifier(pairs_axis.label, "sparse") + "_pairs")
            self.fw.names.reserve(arg)
            self.selection = Selection(pairs_axis, arg, None)
            self.all_pairs = self.fw.names.fresh("all_pairs")
        for w in self.inputs:
            self._note_mask(w)
        self.real_parts = complex_parts.eligible(self, body, pairs_axis is not None)
        outs = self.lower(body, list(self.inputs))
        self._finish(outs, statics)

    def _finish(self, outs: list[Wire], statics) -> None:
        gen, info = self.gen, self.info
        ret = []
        info.outputs = []
        pairs_outputs = []
        if self.selection is not None:
            self._pairs_size = self.axis_size(self.selection.axis)
            self.lead()
        outs = [flips.plain(self, w) for w in outs]
        for w in outs:
            if w.pairs is not None and w.pairs is not self.selection:
                escape(w.origins, "a pairs array leaves the block")
            pairs_outputs.append(w.pairs is not None)
            if w.pairs is not None:
                if w.var not in ret:
                    # no pairs passed: every pair was computed; hand back the dense layout
                    self.gen.prelude.add("pairs")
                    self.fw.emit(f"if {self.all_pairs}:")
                    self.fw.emit(INDENT + f"{w.var} = pairs_to_dense({w.var}, {self.lead()}, "
                                 f"{self._pairs_size}, {self.selection.pairs})")
                ret.append(w.var)
                info.outputs.append((w.array, None, True))
                continue
            var = w.var
            if not w.full and self.lead_source is not None:
                var = self.fw.bind(identifier(w.var) if w.var.isidentifier() else "result",
                                   f"{w.var}.expand(*lead, *{w.var}.shape)",
                                   shape_text(w.array))
                self.lead_used = True
            ret.append(var)
            if w.live is not None:
                ret.append(w.live)
            info.outputs.append((w.array, w.static, w.full or self.lead_source is not None))
        info.pairs_outputs = tuple(pairs_outputs)
        info.experts = expert_facts(self, [w.rank for w, live in zip(self.inputs, self.input_masks)
                                           for _ in range(1 + (live is not None))])
        info.input_static = tuple(statics)
        info.tape_after = dict(self.tape)
        info.uses_tape = self.uses_tape
        info.needs_quant = self.needs_quant or self.passes_quant
        info.needs_static = self.needs_static or self.passes_static
        info.needs_stand_in = bool(self.user_data) or self.passes_stand_in
        info.members = list(self.members.items)
        ctor = set(self.sizes.init_symbols) | set(self.sizes.fwd_symbols)
        for m in self.members.items:
            if isinstance(m, Sub):
                ctor |= set(m.info.ctor_symbols)
        info.ctor_symbols = sorted(ctor, key=lambda s: gen.sym_name(s))
        derivable = self.sizes.derivations()
        info.kw_symbols = sorted((s for s in self.sizes.data_used if s not in derivable),
                                 key=lambda s: gen.sym_name(s))
        info.source = class_source(self, ret, derivable)

    # -- lowering ------------------------------------------------------------------------------
    def lower(self, m: Morphism, wires: list[Wire]) -> list[Wire]:
        if isinstance(m, Rearrangement):
            if len(wires) != len(m.dom):
                raise SpecError(f"rearrangement of {len(m.dom)} wires applied to {len(wires)}",
                                m.path)
            return [wires[i] for i in m.mapping]
        if isinstance(m, Composed):
            return self.lower_composed(m, wires)
        if isinstance(m, ProductOfMorphisms):
            out, pos = [], 0
            for part in m.content:
                n = len(part.dom)
                out.extend(self.lower(part, wires[pos:pos + n]))
                pos += n
            if pos != len(wires):
                raise SpecError(f"product consumes {pos} wires of {len(wires)}", m.path)
            return out
        if isinstance(m, Block):
            return self._noted(self.lower_block(m, wires))
        if isinstance(m, Broadcasted):
            return self._noted(lower_broadcasted(self, m, wires))
        if isinstance(m, ParaWrap):
            return self.lower_parawrap(m, [flips.plain(self, w) for w in wires])
        if isinstance(m, Grab):
            return [self.tape_read(m.tape, m.size)]
        if isinstance(m, Drop):
            self.tape_write(m.tape, flips.plain(self, wires[0]))
            return []
        if isinstance(m, Truncated):
            raise TruncatedError(f"the {m.expected or 'term'} was cut off ({m.reason}); "
                                 "compile a complete block or the salvaged prefix", m.path)
        raise SpecError(f"cannot generate code for a {type(m).__name__}",
                        getattr(m, "path", ""))

    def _noted(self, wires: list[Wire]) -> list[Wire]:
        for w in wires:
            self._note_mask(w)
        return wires

    def _note_mask(self, w: Wire) -> None:
        """Remember the first wire carrying a data-dependent selection of a sparse axis."""
        if is_selection_mask(w):
            self.masks.setdefault(w.array.shape[0].uid, w)

    def lower_composed(self, m: Composed, wires: list[Wire]) -> list[Wire]:
        items = m.content  # normalized: ir.pipeline.normalize ran in codegen.generate
        i = 0
        while i < len(items):
            item = items[i]
            nxt = items[i + 1] if i + 1 < len(items) else None
            if nxt is not None and fusible_view(self, item, nxt):
                wires = lower_broadcasted(self, item, wires, then=nxt)
                i += 2
                continue
            wires = self.lower(item, wires)
            i += 1
        return wires

    def inline_block(self, block: Block) -> bool:
        return (block.tag.drawing == BlockDrawing.BODY_IN_PLACE
                and repetitions(block, self.gen.env) == 1)

    def lower_block(self, block: Block, wires: list[Wire]) -> list[Wire]:
        if self.inline_block(block):
            self.fw.comment(comment_text(block.title))
            return self.lower(block.body, wires)
        return self.call_block(block, wires)

    # -- block calls and the tape (codegen/calls.py, codegen/tape.py) -----------------------
    def call_block(self, block: Block, wires: list[Wire], lifted: tuple = ()) -> list[Wire]:
        return calls.call_block(self, block, wires, lifted)

    def lower_parawrap(self, pw: ParaWrap, wires: list[Wire]) -> list[Wire]:
        return tape.lower_parawrap(self, pw, wires)

    def tape_read(self, slot: TapeSlot, array: Array, bind: bool = True) -> Wire:
        return tape.tape_read(self, slot, array, bind)

    def tape_write(self, slot: TapeSlot, wire: Wire) -> None:
        tape.tape_write(self, slot, wire)


__all__ = ["ClassBuilder", "ClassInfo", "Param", "Sub", "TapeEntry"]
