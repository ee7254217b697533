"""Lowering of morphisms to the statements of a ``forward`` method, one class per block body.

:class:`Generator` holds what is global to one generated file (the binding, the names of size
symbols and tape slots, the classes made so far); :class:`ClassBuilder` writes one class: it
walks the block body (FORMAT.md §8, §10), keeps every value as a :class:`~codegen.wires.Wire`,
inlines one-operator blocks drawn in place (casts, elementwise maps, views) and calls a submodule
for every other block, with an ``nn.ModuleList`` loop for a repeated one.
"""
from __future__ import annotations

import hashlib
import textwrap
from dataclasses import dataclass, field

import numpy as np
import sympy
from ncdc.ir.arrays import Array
from ncdc.ir.env import Env
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

from . import liveness
from .emit import FunctionWriter, SizePrinter, drop_unused, wrap_line
from .fingerprint import structural_key
from .names import (
    RESERVED_ATTRIBUTES,
    Namer,
    check_docstring,
    class_name,
    comment_text,
    docstring,
    identifier,
    snake_case,
)
from .pairs import (
    ARGUMENT,
    NotCompact,
    PairsEscape,
    Selection,
    escape,
    is_selection_mask,
    leading_sparse_axis,
)
from .wires import Wire

INDENT = "    "


@dataclass
class Param:
    """A parameter or buffer attribute of a class, in IR pre-order."""

    attr: str
    site: Broadcasted
    role: str


@dataclass
class Sub:
    """A submodule attribute: one instance, or a ModuleList of ``repeat`` instances."""

    attr: str
    info: ClassInfo
    repeat: int | None


@dataclass
class TapeEntry:
    key: str
    array: Array
    static: liveness.StaticLive | None
    full: bool


@dataclass
class ClassInfo:
    """A generated class and the facts its callers need."""

    key: str
    name: str
    source: str = ""
    ctor_symbols: list = field(default_factory=list)  # FreeNumerics, sorted by name
    kw_symbols: list = field(default_factory=list)  # data-fixed sizes the caller passes
    uses_tape: bool = False
    needs_quant: bool = False
    needs_static: bool = False  # takes the static_shapes switch (a selection's pairs)
    input_static: tuple = ()
    outputs: list = field(default_factory=list)  # (Array, StaticLive | None, full)
    tape_after: dict = field(default_factory=dict)
    members: list = field(default_factory=list)
    pairs_outputs: tuple = ()  # per output: returned as a pairs array (pairs mode)


def shape_text(array: Array) -> str:
    return "[" + ", ".join(comment_text(a.label, 20) for a in array.shape) + "]"


class Generator:
    """State shared by every class of one generated file."""

    def __init__(self, env: Env, data_symbols: set, quant: str, all_symbols: list):
        self.env = env
        self.quant = quant
        self.data_symbols = set(data_symbols)
        ref_values = {s: 1 for s in self.data_symbols}
        self.ref_env = env.with_values(ref_values) if ref_values else env
        self.classes: dict[str, ClassInfo] = {}
        self.order: list[ClassInfo] = []
        self.class_names = Namer()
        self.prelude: set[str] = set()
        self.symbol_names = self._name_symbols(all_symbols)
        self.slot_keys: dict[int, str] = {}
        self._slot_namer = Namer()
        self._key_cache: dict = {}

    @staticmethod
    def _name_symbols(symbols) -> dict:
        namer = Namer(RESERVED_ATTRIBUTES | {"self", "lead", "tape", "quant", "one", "theta"})
        out = {}
        for s in sorted(set(symbols), key=lambda s: (identifier(s.label, "size", lower=False),
                                                     s.uid)):
            out[s] = namer.fresh(identifier(s.label, "size", lower=False))
        return out

    def sym_name(self, sym: FreeNumeric) -> str:
        if sym not in self.symbol_names:
            taken = Namer(set(self.symbol_names.values()) | RESERVED_ATTRIBUTES)
            self.symbol_names[sym] = taken.fresh(identifier(sym.label, "size", lower=False))
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

        def make(excluded):
            name = self.class_names.fresh(class_name(block.title), sep="")
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
                    raise AssertionError(f"internal: pairs escape without a new site ({exc})")
                excluded = excluded | exc.sites

    def snapshot(self):
        """What building a class can change here (classes made, names taken, preludes)."""
        return (dict(self.classes), list(self.order), set(self.class_names.taken),
                set(self.prelude), dict(self.symbol_names), dict(self.slot_keys),
                set(self._slot_namer.taken))

    def restore(self, saved) -> None:
        (self.classes, self.order, self.class_names.taken, self.prelude, self.symbol_names,
         self.slot_keys, self._slot_namer.taken) = (
            dict(saved[0]), list(saved[1]), set(saved[2]), set(saved[3]), dict(saved[4]),
            dict(saved[5]), set(saved[6]))

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


def _join(a: liveness.StaticLive | None, b: liveness.StaticLive | None):
    if a is None and b is None:
        return None
    nd = (a or b).possible.ndim
    pa, sa = liveness.parts(a, nd)
    pb, sb = liveness.parts(b, nd)
    return liveness.make(pa | pb, sa & sb)


class ClassBuilder:
    """Writes one ``nn.Module`` class for a block body."""

    def __init__(self, gen: Generator, info: ClassInfo, title: str, description: str | None,
                 formula: str | None, excluded: frozenset = frozenset()):
        self.gen = gen
        self.info = info
        self.title = title
        self.description = description
        self.formula = formula
        self.attrs = Namer(RESERVED_ATTRIBUTES | set(gen.symbol_names.values()))
        self.init_lines: list[str] = []
        self.members: list = []
        self.init_symbols: set = set()
        self.fwd_symbols: set = set()
        self.data_used: set = set()
        self.needs_quant = False  # this class rounds (emulate mode)
        self.passes_quant = False  # a submodule rounds
        self.needs_static = False  # this class makes a selection's pairs
        self.passes_static = False  # a submodule does
        self.needs_one = False
        self.uses_tape = False
        self.lead_source: tuple[str, int] | None = None
        self.lead_used = False
        reserved = {"self", "torch", "nn", "math", "F", "functools", "lead", "tape"}
        reserved |= {gen.symbol_names[s] for s in gen.data_symbols if s in gen.symbol_names}
        self.fw = FunctionWriter(INDENT * 2, reserved)
        self.size_code = SizePrinter(self._fwd_symbol)
        self.init_size_code = SizePrinter(self._init_symbol)
        self.inputs: list[Wire] = []
        self.input_masks: list[str | None] = []
        self.tape: dict[int, TapeEntry] = {}
        # live pairs of sparse axes (codegen/pairs.py)
        self.selection: Selection | None = None  # pairs mode: the pairs argument
        self.all_pairs: str | None = None  # pairs mode: the flag "no pairs were passed"
        self._pairs_size = ""  # pairs mode: code of the sparse axis's length
        self.masks: dict[int, Wire] = {}  # sparse axis uid -> a wire carrying its selection
        self.selections: dict[int, Selection] = {}  # sparse axis uid -> pairs made here
        self.excluded_sites = frozenset(excluded)  # call sites kept dense
        self.call_sites = 0

    # -- sizes -----------------------------------------------------------------------------
    def _fwd_symbol(self, sym: FreeNumeric) -> str:
        name = self.gen.sym_name(sym)
        if sym in self.gen.data_symbols:
            self.data_used.add(sym)
            return name
        self.fwd_symbols.add(sym)
        return f"self.{name}"

    def _init_symbol(self, sym: FreeNumeric) -> str:
        if sym in self.gen.data_symbols:
            raise SpecError(f"the size {sym.label} is fixed by the data (token count) but a "
                            "parameter shape or repetition count depends on it")
        self.init_symbols.add(sym)
        return self.gen.sym_name(sym)

    def axis_size(self, axis) -> str:
        """Code for an axis length: read off an input that has the axis when the length is
        fixed by the data (``x_m.shape[-2]``), else the size expression (``self.h``)."""
        expr = sympy.sympify(axis.size)
        if any(s in self.gen.data_symbols for s in expr.free_symbols):
            for w in self.inputs:
                for d, a in enumerate(w.array.shape):
                    if a == axis:
                        return f"{w.var}.shape[{d - w.rank}]"
        return self.size_code(axis.size)

    def lead(self) -> str | None:
        """Name of the leading (batch) shape of this forward, or None in a nullary class."""
        if self.lead_source is None:
            return None
        self.lead_used = True
        return "lead"

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
        info.input_static = tuple(statics)
        info.tape_after = dict(self.tape)
        info.uses_tape = self.uses_tape
        info.needs_quant = self.needs_quant or self.passes_quant
        info.needs_static = self.needs_static or self.passes_static
        info.members = list(self.members)
        ctor = set(self.init_symbols) | set(self.fwd_symbols)
        for m in self.members:
            if isinstance(m, Sub):
                ctor |= set(m.info.ctor_symbols)
        info.ctor_symbols = sorted(ctor, key=lambda s: gen.sym_name(s))
        derivable = self._derivations()
        info.kw_symbols = sorted((s for s in self.data_used if s not in derivable),
                                 key=lambda s: gen.sym_name(s))
        info.source = self._assemble(ret, derivable)

    def _derivations(self) -> dict:
        """Data-fixed sizes this forward reads off its inputs: sym -> code."""
        out = {}
        for sym in sorted(self.data_used, key=lambda s: self.gen.sym_name(s)):
            for w in self.inputs:
                code = None
                for d, axis in enumerate(w.array.shape):
                    expr = sympy.sympify(axis.size)
                    if sym not in expr.free_symbols:
                        continue
                    others = [s for s in expr.free_symbols
                              if s in self.gen.data_symbols and s != sym]
                    if others:
                        continue
                    n = sympy.Dummy("n", integer=True, positive=True)
                    sol = sympy.solve(sympy.Eq(expr, n), sym)
                    if len(sol) != 1:
                        continue
                    dim = f"{w.var}.shape[{d - w.rank}]"
                    printer = SizePrinter(lambda s, dim=dim, n=n: dim if s == n
                                          else self._fwd_symbol(s))
                    try:
                        code = printer(sol[0])
                    except SpecError:
                        code = None
                    if code is not None:
                        break
                if code is not None:
                    out[sym] = code
                    break
        return out

    def _assemble(self, ret: list[str], derivable: dict) -> str:
        gen, info = self.gen, self.info
        lines = [f"class {info.name}(nn.Module):"]
        doc = self._doc_text()
        lit = docstring(doc, INDENT)
        check_docstring(lit, INDENT, doc)
        lines.append(INDENT + lit)
        lines.append("")
        params = []
        for s in info.ctor_symbols:
            d = gen.default_of(s)
            params.append(f"{gen.sym_name(s)}={d}" if d is not None else gen.sym_name(s))
        if info.needs_quant:
            params.append(f"quant={gen.quant!r}")
        if info.needs_static:
            params.append("static_shapes=False")
        sig = "self" + (", *, " + ", ".join(params) if params else "")
        lines.append(INDENT + f"def __init__({sig}):")
        lines.append(INDENT * 2 + "super().__init__()")
        for s in sorted(self.fwd_symbols, key=lambda s: gen.sym_name(s)):
            n = gen.sym_name(s)
            lines.append(INDENT * 2 + f"self.{n} = {n}")
        if self.needs_quant:
            lines.append(INDENT * 2 + 'self.emulate = quant == "emulate"')
        if self.needs_static:
            lines.append(INDENT * 2 + "self.static_shapes = static_shapes")
        if self.needs_one:
            lines.append(INDENT * 2 + 'self.register_buffer("one", torch.ones(()), '
                         'persistent=False)')
        lines.extend(self.init_lines)
        lines.append("")
        args = ["self"]
        for w, live in zip(self.inputs, self.input_masks):
            args.append(w.var)
            if live is not None:
                args.append(live)
        if self.selection is not None:
            args.append(f"{self.selection.pairs}=None")
        kw = []
        for s in info.kw_symbols:
            d = gen.default_of(s)
            kw.append(f"{gen.sym_name(s)}: int = {d}" if d is not None
                      else f"{gen.sym_name(s)}: int")
        if self.uses_tape:
            kw.append("tape: dict | None = None")
        sig = ", ".join(args) + (", *, " + ", ".join(kw) if kw else "")
        head = INDENT + f"def forward({sig}):"
        lines.append(head)
        body = []
        if self.uses_tape:
            body.append(INDENT * 2 + "tape = {} if tape is None else tape")
        if self.lead_used and self.lead_source is not None:
            shapes = [f"{w.var}.shape[:{w.var}.dim() - {w.rank}]" if w.rank else f"{w.var}.shape"
                      for w in self.inputs]
            code = shapes[0] if len(shapes) == 1 else \
                f"torch.broadcast_shapes({', '.join(shapes)})"
            body.append(INDENT * 2 + f"lead = {code}" + "  # leading (batch) dims")
        for sym, code in derivable.items():
            if sym in self.data_used:
                body.append(INDENT * 2 + f"{gen.sym_name(sym)} = {code}"
                            + "  # fixed by the data")
        if self.selection is not None:
            sel = self.selection
            body.append(INDENT * 2 + f"{self.all_pairs} = {sel.pairs} is None")
            body.append(INDENT * 2 + f"if {self.all_pairs}:  # every (row, "
                        f"{comment_text(sel.axis.label, 20)}) pair, dense results")
            body.append(INDENT * 3 + f"{sel.pairs} = every_pair(lead, {self._pairs_size}, "
                        f"{self.inputs[0].var}.device)")
        body.extend(self.fw.lines)
        if not ret:
            body.append(INDENT * 2 + "return ()")
        elif len(ret) == 1:
            body.append(INDENT * 2 + f"return {ret[0]}")
        else:
            body.append(INDENT * 2 + "return " + ", ".join(ret))
        body = drop_unused(body, keep=set())
        lines.extend(body)
        return "\n".join(w for ln in lines for w in wrap_line(ln)) + "\n"

    def _doc_text(self) -> str:
        from ncdc.ir.names import plain_title

        parts = [plain_title(self.title) or "Block"]
        if self.description:
            parts.append(textwrap.fill(" ".join(self.description.split()), 88))
        if self.formula:
            parts.append(textwrap.fill("Formula: " + " ".join(self.formula.split()), 88,
                                       break_long_words=False, break_on_hyphens=False))
        ins = ", ".join(f"{w.var}: {comment_text(str(w.array), 60)}" for w in self.inputs)
        outs = ", ".join(comment_text(str(a), 60) for a, _, _ in self.info.outputs)
        parts.append(f"Inputs: {ins or 'none'}.\nReturns: {outs or 'nothing'}.")
        masks = [w.var for w in self.inputs if w.live is not None]
        if masks or any(st is not None for _, st, _ in self.info.outputs):
            parts.append("Arrays that can hold dead positions (FORMAT.md §2.4) travel with a "
                         "bool mask `<name>_live`;\ndead positions hold 0.")
        if self.selection is not None:
            axis = comment_text(self.selection.axis.label, 20)
            parts.append(f"`{self.selection.pairs}`: the live (row, {axis}) pairs of a selection "
                         f"(`live_pairs`). Arrays on {axis} are\ncomputed at those pairs only "
                         f"and returned as pairs arrays, one row per pair; without it\nevery "
                         "pair is computed and they are returned dense.")
        return "\n\n".join(parts)

    # -- members -------------------------------------------------------------------------------
    def add_param(self, base: str, site: Broadcasted, role: str, init_code: str,
                  learned: bool) -> str:
        attr = self.attrs.fresh(base)
        if learned:
            self.init_lines.append(INDENT * 2 + f"self.{attr} = nn.Parameter({init_code})")
        else:
            self.init_lines.append(INDENT * 2 + f'self.register_buffer("{attr}", {init_code})')
        self.members.append(Param(attr, site, role))
        return f"self.{attr}"

    def add_table(self, base: str, init_code: str) -> str:
        """A non-persistent buffer computed at construction (not a parameter)."""
        attr = self.attrs.fresh(base)
        self.init_lines.append(INDENT * 2
                               + f'self.register_buffer("{attr}", {init_code}, persistent=False)')
        return f"self.{attr}"

    def unit(self) -> str:
        self.needs_one = True
        return "self.one"

    def quant_guard(self) -> str:
        self.needs_quant = True
        return "self.emulate"

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
            from .broadcast import lower_broadcasted

            return self._noted(lower_broadcasted(self, m, wires))
        if isinstance(m, ParaWrap):
            return self.lower_parawrap(m, wires)
        if isinstance(m, Grab):
            return [self.tape_read(m.tape, m.size)]
        if isinstance(m, Drop):
            self.tape_write(m.tape, wires[0])
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
        from .broadcast import fusible_view, lower_broadcasted

        items = list(m.content)
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

    def call_block(self, block: Block, wires: list[Wire], lifted: tuple = ()) -> list[Wire]:
        """Call a submodule for ``block`` (a loop over a ModuleList when it repeats);
        ``lifted``: the degree axes the call runs over (for shape comments)."""
        reps = repetitions(block, self.gen.env)
        tape_before = dict(self.tape)
        passed = [w for w in wires if w.pairs is not None]
        if passed:
            escape(frozenset().union(*(w.origins for w in passed)),
                   "a pairs array passed to a block")
        site = self.call_sites
        self.call_sites += 1
        info, sel = None, None
        if reps == 1 and not lifted and site not in self.excluded_sites:
            info, sel = self._pairs_class(block, wires)
        if info is None:
            info = self.gen.class_for(block, wires, self.tape)
        if reps > 1:
            # the class must accept its own outputs: widen its input liveness to a fixpoint
            for _ in range(8):
                outs = [st for _, st, _ in info.outputs]
                if len(outs) != len(wires):
                    raise SpecError(f"block {block.title!r} repeats but its domain and codomain "
                                    "differ", block.path)
                joined = [_join(a, b) for a, b in zip(info.input_static, outs)]
                if all((a is None and b is None) or (a is not None and b is not None
                                                     and a.digest() == b.digest())
                       for a, b in zip(joined, info.input_static)):
                    break
                probe = [Wire(w.var, w.array, w.live or "?", st, w.full)
                         for w, st in zip(wires, joined)]
                info = self.gen.class_for(block, probe, tape_before)
        snake = snake_case(info.name)
        ctor = [f"{self.gen.sym_name(s)}={self.init_size_code(s)}" for s in info.ctor_symbols]
        if info.needs_quant:
            ctor.append("quant=quant")
            self.passes_quant = True
        if info.needs_static:
            ctor.append("static_shapes=static_shapes")
            self.passes_static = True
        make = f"{info.name}({', '.join(ctor)})"
        args = []
        for w, st in zip(wires, info.input_static):
            args.append(w.var)
            if st is not None:
                args.append(w.live if w.live is not None
                            else f"torch.ones({(1,) * w.rank!r}, dtype=torch.bool)")
        if sel is not None:
            args.append(sel.pairs)
        kwargs = [f"{self.gen.sym_name(s)}={self._fwd_symbol(s)}" for s in info.kw_symbols]
        if info.uses_tape:
            kwargs.append("tape=tape")
            self.uses_tape = True
        call_args = ", ".join(args + kwargs)
        outs: list[Wire] = []
        names = []
        if sel is not None:
            origins = frozenset({ARGUMENT if sel is self.selection else site})
        for k, (arr, st, full) in enumerate(info.outputs):
            base = snake if len(info.outputs) == 1 else f"{snake}_{k + 1}"
            var = self.fw.names.fresh(base)
            live = self.fw.names.fresh(var + "_live") if st is not None else None
            if sel is not None and info.pairs_outputs[k]:
                outs.append(Wire(var, arr, None, None, True, pairs=sel, origins=origins))
            else:
                outs.append(Wire(var, arr, live, st, full))
            names.append(var)
            if live is not None:
                names.append(live)
        shapes = ", ".join(shape_text(Array(w.array.datatype, tuple(lifted) + w.array.shape))
                           for w in outs)
        if sel is not None:
            shapes += f" at the live pairs of {comment_text(sel.axis.label, 20)}"
        if reps > 1:
            attr = self.attrs.fresh(snake + "s" if not snake.endswith("s") else snake)
            count = self.init_size_code(block.tag.repetition)
            self.init_lines.append(INDENT * 2 + f"self.{attr} = nn.ModuleList("
                                   f"[{make} for _ in range({count})])")
            self.members.append(Sub(attr, info, reps))
            loop_var = self.fw.names.fresh("block")
            self.fw.comment(f"{comment_text(block.title)}, {reps} times with parameters per "
                            "iteration")
            for w, var, st in zip(wires, outs, info.input_static):
                self.fw.emit(f"{var.var} = {w.var}")
                if st is not None:
                    src = w.live if w.live is not None else "True"
                    self.fw.emit(f"{var.live} = {src}")
            loop_args = []
            for w in outs:
                loop_args.append(w.var)
                if w.live is not None:
                    loop_args.append(w.live)
            target = ", ".join(names)
            call = ", ".join(loop_args + kwargs)
            self.fw.emit(f"for {loop_var} in self.{attr}:")
            self.fw.emit(INDENT + f"{target} = {loop_var}({call})", shapes)
        else:
            attr = self.attrs.fresh(snake)
            self.init_lines.append(INDENT * 2 + f"self.{attr} = {make}")
            self.members.append(Sub(attr, info, None))
            target = ", ".join(names) if names else "_"
            if names:
                self.fw.emit(f"{target} = self.{attr}({call_args})", shapes)
            else:
                self.fw.emit(f"self.{attr}({call_args})")
        self.tape.update(info.tape_after)
        if self.lead_source is None:
            for w in outs:
                w.full = False
        return outs

    def _pairs_class(self, block: Block, wires: list[Wire]):
        """(pairs-mode class, selection) for a call whose outputs hold a sparse axis first when
        this function knows the axis's selection, else (None, None)."""
        if self.lead_source is None or not all(w.full for w in wires):
            return None, None  # the pairs index rows of this function's leading dims
        axes = {}
        for arr in block.cod:
            a = leading_sparse_axis(arr)
            if a is not None:
                axes[a.uid] = a
        for uid in sorted(axes):
            own = self.selection is not None and self.selection.axis.uid == uid
            if not own and uid not in self.selections and uid not in self.masks:
                continue
            saved = self.gen.snapshot()
            try:
                info = self.gen.class_for(block, wires, self.tape, pairs_axis=axes[uid])
            except NotCompact:
                self.gen.restore(saved)
                continue
            if not any(info.pairs_outputs):
                self.gen.restore(saved)
                continue
            return info, (self.selection if own else self._selection(axes[uid]))
        return None, None

    def _selection(self, axis) -> Selection:
        """The live pairs of ``axis`` in this function (made once, from its mask)."""
        sel = self.selections.get(axis.uid)
        if sel is None:
            mask = self.masks[axis.uid]
            self.gen.prelude.add("pairs")
            label = comment_text(axis.label, 20)
            self.needs_static = True
            var = self.fw.bind(identifier(axis.label, "sparse") + "_pairs",
                               f"live_pairs({mask.live}, {self.lead()}, "
                               f"{self.size_code(axis.activity)}, self.static_shapes)",
                               f"the live (row, {label}) pairs")
            sel = Selection(axis, var, mask.live)
            self.selections[axis.uid] = sel
        return sel

    # -- tape ----------------------------------------------------------------------------------
    def lower_parawrap(self, pw: ParaWrap, wires: list[Wire]) -> list[Wire]:
        body_dom = list(pw.body.dom)
        it = iter(wires)
        operands = []
        for g, arr in zip(pw.grabs, body_dom):
            operands.append(self.tape_read(g, arr) if g is not None else next(it))
        results = self.lower(pw.body, operands)
        out = []
        for r, d in zip(results, pw.drops):
            if d is None:
                out.append(r)
            else:
                self.tape_write(d, r)
        return out

    def tape_read(self, slot: TapeSlot, array: Array, bind: bool = True) -> Wire:
        """The value of a tape slot (a local, or the ``tape[...]`` lookup itself)."""
        self.uses_tape = True
        key = self.gen.slot_key(slot)
        entry = self.tape.get(slot.uid)
        static = entry.static if entry is not None else None
        full = entry.full if entry is not None else True
        var, live = f"tape[{key!r}]", None
        if static is not None:
            live = f"tape[{key + '_live'!r}]"
        if bind:
            var = self.fw.bind(key, var, f"tape slot {comment_text(slot.label, 30)}: "
                               + shape_text(array))
            if live is not None:
                live = self.fw.bind(var + "_live", live)
        return Wire(var, array, live, static, full, slot=slot.uid)

    def tape_write(self, slot: TapeSlot, wire: Wire) -> None:
        if wire.pairs is not None:
            escape(wire.origins, "a pairs array written to the tape")
        self.uses_tape = True
        key = self.gen.slot_key(slot)
        if wire.slot == slot.uid and self.tape.get(slot.uid) is not None:
            return
        self.fw.emit(f"tape[{key!r}] = {wire.var}",
                     f"tape slot {comment_text(slot.label, 30)}: " + shape_text(wire.array))
        if wire.live is not None:
            self.fw.emit(f"tape[{key + '_live'!r}] = {wire.live}")
        self.tape[slot.uid] = TapeEntry(key, wire.array, wire.static, wire.full)


def ref_live_shape(gen: Generator, array: Array) -> tuple[int, ...]:
    return tuple(gen.ref_size(a.size) for a in array.shape)


__all__ = ["ClassBuilder", "ClassInfo", "Generator", "Param", "Sub", "TapeEntry", "np"]
