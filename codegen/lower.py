"""Lowering of a block body to one ``nn.Module`` class (docs/format.md §8, §10).

:class:`ClassBuilder` walks the body, keeps every value as a :class:`~codegen.wires.Wire`,
inlines one-operator blocks drawn in place (casts, elementwise maps, views) and calls a
submodule for every other block. The pieces it is made of live in their own modules: its
interface, needs, batch shape and sparse-axis selections (:mod:`codegen.classstate`), sizes
(:mod:`codegen.sizes`), members (:mod:`codegen.members`), forward's statements
(:mod:`codegen.statements`, simplified by :mod:`codegen.passes`), block calls
(:mod:`codegen.calls`), the tape (:mod:`codegen.tape`), the class's text
(:mod:`codegen.class_source`); operators are
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
    CoupledScan,
    Drop,
    Grab,
    Morphism,
    ParaWrap,
    ProductOfMorphisms,
    Rearrangement,
    Scan,
    Truncated,
)
from ncdc.ir.operators import Arithmetic
from ncdc.ir.params import repetitions
from ncdc.ir.rewrites import ContractionView
from ncdc.ir.tags import BlockDrawing, TapeSlot
from ncdc.ir.walk import by_kind

from . import calls, complex_parts, flips, tape
from .broadcast import lower_broadcasted, lower_contraction_view
from .class_source import ClassParts, class_source, method_code
from .classinfo import INDENT, ClassInfo, Param, Sub, TapeEntry, shape_text
from .classstate import Batch, Interface, Needs, PairsState
from .emit import FunctionWriter
from .escapes import NotCompact, escape
from .experts import expert_facts
from .members import Members
from .names import (
    FORWARD_LOCALS,
    RESERVED_ATTRIBUTES,
    Namer,
    array_name,
    comment_text,
    identifier,
    snake_case,
)
from .pairs import Selection, is_selection_mask
from .scan import lower_coupled_scan, lower_scan
from .sizes import SizeCodes
from .statements import IF, Rounding
from .wires import Wire, zeroed


class ClassBuilder:
    """Writes one ``nn.Module`` class for a block body."""

    def __init__(self, gen, info: ClassInfo, title: str, description: str | None,
                 formula: str | None, excluded: frozenset = frozenset()):
        self.gen = gen
        self.info = info
        self.iface = Interface(title, description, formula)
        self.needs = Needs()
        self.batch = Batch()
        self.pairs = PairsState(excluded=frozenset(excluded))
        self.members = Members(RESERVED_ATTRIBUTES | set(gen.symbol_names.values()),
                               formats=gen.weight_formats)
        self.sizes = SizeCodes(gen)
        self.sizes.inputs = self.iface.inputs
        reserved = set(FORWARD_LOCALS)
        reserved |= {gen.symbol_names[s] for s in gen.data_symbols if s in gen.symbol_names}
        self.fw = FunctionWriter(INDENT * 2, reserved)
        self.tape: dict[int, TapeEntry] = {}
        self.real_parts = False  # complex values held as real parts (codegen/complex_parts.py)
        self.methods: list[ClassInfo] = []  # blocks called here as base-class methods
        self.computes_tables = False  # lowering a callee's rotary table here (shared_table)
        self.shared: dict = {}  # (table sites' keys, real parts) -> its names computed here
        self.table_vars: dict = {}  # argument holding a passed table -> (its sites, base name)

    # -- sizes (codegen/sizes.py) -----------------------------------------------------------
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
        return self.batch.lead()

    # -- members (codegen/members.py) -------------------------------------------------------
    def stand_in_flag(self, title: str) -> str:
        """The flag saying user data may be stood in for (the class holds ``title``)."""
        self.needs.user_data.append(title)
        return "self.stand_in"

    def rounding(self, encoding: str, channels: str | None = None) -> Rounding:
        """Rounding to a storage ``encoding`` in emulate mode (MX blocks of ``channels``): the
        base class's ``self.held``, the identity in exact mode."""
        self.needs.quant = True
        return Rounding(encoding, channels)

    # -- building ----------------------------------------------------------------------------
    def build(self, body: Morphism, dom: list[Array], statics: list, tape: dict,
              pairs_axis=None) -> None:
        """Write the class for ``body``; with ``pairs_axis`` (a sparse axis) in pairs mode:
        forward takes the axis's live pairs and returns the arrays on it as pairs arrays."""
        self.tape = dict(tape)
        arg_names = Namer(set(self.fw.names.taken))
        for _k, (arr, st) in enumerate(zip(dom, statics, strict=False)):
            var = arg_names.fresh(array_name(arr))
            self.fw.names.reserve(var)
            live = None
            if st is not None:
                live = arg_names.fresh(var + "_live")
                self.fw.names.reserve(live)
            self.iface.inputs.append(Wire(var, arr, live, st, True))
            self.iface.input_masks.append(live)
        if self.iface.inputs:
            first = self.iface.inputs[0]
            self.batch.source = (first.var, first.rank)
        if pairs_axis is not None:
            if not self.iface.inputs:
                raise NotCompact("a block without inputs has no rows")
            arg = arg_names.fresh(identifier(pairs_axis.label, "sparse") + "_pairs")
            self.fw.names.reserve(arg)
            self.iface.selection = Selection(pairs_axis, arg, None)
            self.iface.all_pairs = self.fw.names.fresh("all_pairs")
        for w in self.iface.inputs:
            self._note_mask(w)
        self.real_parts = complex_parts.eligible(self.inline_block, body, pairs_axis is not None)
        outs = self.lower(body, list(self.iface.inputs))
        self._finish(outs, statics)

    def _finish(self, outs: list[Wire], statics) -> None:
        gen, info = self.gen, self.info
        ret = []
        info.outputs = []
        pairs_outputs = []
        if self.iface.selection is not None:
            self.iface.pairs_size = self.axis_size(self.iface.selection.axis)
            self.lead()
        outs = [zeroed(self.fw, flips.plain(self.fw, w)) for w in outs]
        info.output_names = tuple(w.var for w in outs)
        for w in outs:
            if w.pairs is not None and w.pairs is not self.iface.selection:
                escape(w.origins, "a pairs array leaves the block")
            pairs_outputs.append(w.pairs is not None)
            if w.pairs is not None:
                if w.var not in ret:
                    # no pairs passed: every pair was computed; hand back the dense layout
                    self.gen.prelude.add("pairs")
                    with self.fw.nested(IF, self.iface.all_pairs):
                        self.fw.assign(w.var, f"pairs_to_dense({w.var}, {self.lead()}, "
                                       f"{self.iface.pairs_size}, {self.iface.selection.pairs})")
                ret.append(w.var)
                info.outputs.append((w.array, None, True))
                continue
            var = w.var
            if not w.full and self.batch.source is not None:
                var = self.fw.bind(identifier(w.var) if w.var.isidentifier() else "result",
                                   f"{w.var}.expand(*lead, *{w.var}.shape)",
                                   shape_text(w.array))
                self.batch.used = True
            ret.append(var)
            if w.live is not None:
                ret.append(w.live)
            info.outputs.append((w.array, w.static, w.full or self.batch.source is not None))
        info.pairs_outputs = tuple(pairs_outputs)
        ret[:] = self._passed_tables(ret)
        info.tables = tuple((sites, len(names) == 2) for _, sites, names, _ in self.iface.tables)
        info.experts = expert_facts(self.iface.selection, info.pairs_outputs,
                                    [w.rank for w, live in zip(self.iface.inputs,
                                                               self.iface.input_masks, strict=False)
                                     for _ in range(1 + (live is not None))])
        info.input_static = tuple(statics)
        info.tape_after = dict(self.tape)
        info.uses_tape = self.needs.tape
        info.needs_quant = self.needs.quant or self.needs.passes_quant
        info.needs_static = self.needs.static or self.needs.passes_static
        info.needs_stand_in = bool(self.needs.user_data) or self.needs.passes_stand_in
        info.members = list(self.members.items)
        info.user_data = tuple(dict.fromkeys([*self.needs.user_data, *(
            t for m in self.members.items if isinstance(m, Sub) for t in m.info.user_data)]))
        ctor = set(self.sizes.init_symbols) | set(self.sizes.fwd_symbols)
        for m in self.members.items:
            if isinstance(m, Sub):
                ctor |= set(m.info.ctor_symbols)
        for m in self.methods:
            ctor |= set(m.ctor_symbols)
        info.ctor_symbols = sorted(ctor, key=lambda s: gen.sym_name(s))
        if self.stateless():
            info.method = snake_case(info.name)
        derivable = self.sizes.derivations()
        info.kw_symbols = sorted((s for s in self.sizes.data_used if s not in derivable),
                                 key=lambda s: gen.sym_name(s))
        info.parts = ClassParts(gen, info, self.iface, self.needs, self.batch, self.sizes,
                                self.members, self.fw.body, ret, derivable)
        info.source = class_source(info.parts)
        if info.method:  # an earlier block's method of the same code serves this one too
            code = method_code(info.source)
            same = next((m for m in gen.order if m.method and m.source
                         and method_code(m.source) == code), None)
            if same is not None:
                info.method, info.source = same.method, ""

    def stateless(self) -> bool:
        """Whether the class holds nothing of its own, so that it is written as a method of
        the base class (:func:`codegen.class_source.method_source`): no parameter, buffer,
        table or submodule, no user data, no selection's pairs, no token read keeping decoding
        state; never the root."""
        return (self.info.key != "root" and not self.members.items and not self.members.init
                and not self.members.reset and not self.members.token_sites
                and not self.needs.user_data and not self.needs.passes_stand_in
                and not self.needs.static and not self.needs.passes_static
                and self.iface.selection is None)

    # -- lowering ------------------------------------------------------------------------------
    def lower(self, m: Morphism, wires: list[Wire]) -> list[Wire]:
        """The wires ``m`` gives when applied to ``wires``: the rule of its kind
        (:data:`_LOWERING`, the most derived class that has one)."""
        rule = by_kind(_LOWERING, m)
        if rule is None:
            raise SpecError(f"cannot generate code for a {type(m).__name__}",
                            getattr(m, "path", ""))
        if not isinstance(m, (Broadcasted, Rearrangement, Composed, ProductOfMorphisms)):
            wires = [zeroed(self.fw, w) for w in wires]  # a Broadcasted zeroes its operands
        return rule(self, m, wires)

    def _rearrange(self, m: Rearrangement, wires: list[Wire]) -> list[Wire]:
        if len(wires) != len(m.dom):
            raise SpecError(f"rearrangement of {len(m.dom)} wires applied to {len(wires)}",
                            m.path)
        return [wires[i] for i in m.mapping]

    def _composed(self, m: Composed, wires: list[Wire]) -> list[Wire]:
        for item in m.content:
            wires = self.lower(item, wires)
        return wires

    def _product(self, m: ProductOfMorphisms, wires: list[Wire]) -> list[Wire]:
        out, pos = [], 0
        for part in m.content:
            n = len(part.dom)
            out.extend(self.lower(part, wires[pos:pos + n]))
            pos += n
        if pos != len(wires):
            raise SpecError(f"product consumes {pos} wires of {len(wires)}", m.path)
        return out

    def _drop(self, m: Drop, wires: list[Wire]) -> list[Wire]:
        self.tape_write(m.tape, flips.plain(self.fw, wires[0]))
        return []

    def _truncated(self, m: Truncated, wires: list[Wire]) -> list[Wire]:
        raise TruncatedError(f"the {m.expected or 'term'} was cut off ({m.reason}); "
                             "compile a complete block or the salvaged prefix", m.path)

    def _noted(self, wires: list[Wire]) -> list[Wire]:
        for w in wires:
            self._note_mask(w)
        return wires

    def _note_mask(self, w: Wire) -> None:
        """Remember the first wire carrying a data-dependent selection of a sparse axis."""
        if is_selection_mask(w):
            self.pairs.masks.setdefault(w.array.shape[0].uid, w)

    def inline_block(self, block: Block) -> bool:
        return (block.tag.drawing == BlockDrawing.BODY_IN_PLACE
                and repetitions(block, self.gen.env) == 1)

    def lower_block(self, block: Block, wires: list[Wire]) -> list[Wire]:
        if self.inline_block(block):
            self.fw.comment(comment_text(block.title))
            return self.lower(block.body, wires)
        return self.call_block(block, wires)

    # -- rotary tables (codegen/rules/sources.py) -------------------------------------------
    def table_argument(self, sites: tuple, base: str) -> tuple[str, ...] | None:
        """The forward arguments holding the value of ``sites`` (a rotary table, then the
        pointwise maps applied to it alone, such as its conjugate), which the caller computes
        once per forward for every block it calls that reads it (:meth:`shared_table`); None
        where this class computes it itself: the root, a class in pairs mode (whose inputs the
        expert exchange routes), or while lowering a callee's table."""
        if self.info.key == "root" or self.computes_tables or self.iface.selection is not None:
            return None
        key = tuple(self.gen.key_of(s) for s in sites)
        for k, _, names, _ in self.iface.tables:
            if k == key:
                return names
        parts = ("_cos", "_sin") if self.real_parts else ("_table",)
        names = tuple(self.fw.names.fresh(base + p) for p in parts)
        self.iface.tables.append((key, sites, names, base))
        self.table_vars[names[0]] = (sites, base)
        return names

    def _table_map(self, m: Broadcasted, wires: list[Wire]) -> list[Wire] | None:
        """A pointwise map of a passed table alone, passed by the caller too (None: not one)."""
        if (len(wires) != 1 or len(m.output_weaves) != 1
                or not isinstance(m.operator, Arithmetic) or wires[0].var not in self.table_vars):
            return None
        sites, base = self.table_vars[wires[0].var]
        names = self.table_argument((*sites, m), base)
        if names is None:
            return None
        return [Wire(names[0], m.cod[0], full=False, imag=names[1] if len(names) > 1 else None)]

    def _passed_tables(self, ret: list[str]) -> list[str]:
        """Keep the table arguments the body reads or returns, each under its plainest free
        name; returns ``ret`` renamed alike."""
        read = {n for st in self.fw.body for n in (*st.reads, *st.bound)} | set(ret)
        kept = [t for t in self.iface.tables if any(n in read for n in t[2])]
        for i, (key, sites, names, base) in enumerate(kept):
            plain = tuple(base + p for p in (("_cos", "_sin") if len(names) == 2 else ("_table",)))
            others = {n for t in kept if t[2] is not names for n in t[2]}
            if plain != names and not (set(plain) & (read | others)):
                for old, new in zip(names, plain, strict=True):
                    self.fw.body[:] = [st.renamed(old, new) for st in self.fw.body]
                    ret = [new if r == old else r for r in ret]
                kept[i] = (key, sites, plain, base)
        self.iface.tables[:] = kept
        return ret

    def shared_table(self, sites: tuple, real_parts: bool) -> list[str]:
        """The names of the value of ``sites`` (a rotary table, cos and sin where
        ``real_parts``, then pointwise maps of it) that this class computes for its callees,
        once per forward."""
        key = (tuple(self.gen.key_of(s) for s in sites), real_parts)
        if key not in self.shared:
            saved = self.real_parts, self.computes_tables
            self.real_parts, self.computes_tables = real_parts, True
            try:
                if len(sites) > 1:
                    parent = self.shared_table(sites[:-1], real_parts)
                    w = Wire(parent[0], sites[-2].cod[0], full=False,
                             imag=parent[1] if real_parts else None)
                    (w,) = lower_broadcasted(self, sites[-1], [w])
                else:
                    (w,) = lower_broadcasted(self, sites[0], [])
            finally:
                self.real_parts, self.computes_tables = saved
            self.shared[key] = [w.var] + ([w.imag] if real_parts else [])
        return self.shared[key]

    # -- block calls and the tape (codegen/calls.py, codegen/tape.py) -----------------------
    def call_block(self, block: Block, wires: list[Wire], lifted: tuple = ()) -> list[Wire]:
        return calls.call_block(self, block, wires, lifted)

    def lower_parawrap(self, pw: ParaWrap, wires: list[Wire]) -> list[Wire]:
        return tape.lower_parawrap(self, pw, wires)

    def tape_read(self, slot: TapeSlot, array: Array, bind: bool = True) -> Wire:
        return tape.tape_read(self, slot, array, bind)

    def tape_write(self, slot: TapeSlot, wire: Wire) -> None:
        tape.tape_write(self, slot, zeroed(self.fw, wire))


__all__ = ["ClassBuilder", "ClassInfo", "Param", "Sub", "TapeEntry"]


_LOWERING = {
    Rearrangement: ClassBuilder._rearrange,
    ContractionView: lower_contraction_view,
    Composed: ClassBuilder._composed,
    ProductOfMorphisms: ClassBuilder._product,
    Block: lambda cl, m, wires: cl._noted(cl.lower_block(m, wires)),
    Broadcasted: lambda cl, m, wires: cl._table_map(m, wires) or cl._noted(
        lower_broadcasted(cl, m, wires)),
    ParaWrap: lambda cl, m, wires: cl.lower_parawrap(m, [flips.plain(cl.fw, w) for w in wires]),
    Grab: lambda cl, m, wires: [cl.tape_read(m.tape, m.size)],
    Drop: ClassBuilder._drop,
    Scan: lower_scan,
    CoupledScan: lower_coupled_scan,
    Truncated: ClassBuilder._truncated,
}
"""Morphism kind -> ``rule(lowering, m, wires) -> wires`` (a Fused node's own entry before
the Composed one it derives from, :func:`ir.walk.by_kind`)."""
