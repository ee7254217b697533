"""Calling a submodule for a block occurrence: one instance, or an ``nn.ModuleList`` loop for a
repeated block (its input liveness widened to a fixpoint); in pairs mode where the callee's
outputs hold a selected sparse axis first (``codegen/pairs.py``); over chunks of the token
axis where the block computes each token alone and grows along a window (``codegen/chunks.py``)."""
from __future__ import annotations

from ncdc.ir.arrays import Array
from ncdc.ir.datatypes import kind
from ncdc.ir.errors import SpecError
from ncdc.ir.morphisms import Block
from ncdc.ir.params import repetitions

from . import chunks, dtypes, flips, liveness
from .classinfo import shape_text
from .escapes import ARGUMENT, NotCompact, escape
from .experts import note_unsliceable
from .names import attribute_name, comment_text, identifier
from .pairs import Selection, leading_sparse_axis
from .statements import FOR
from .wires import Wire


def _join(a: liveness.StaticLive | None, b: liveness.StaticLive | None):
    if a is None and b is None:
        return None
    nd = (a or b).possible.ndim
    pa, sa = liveness.parts(a, nd)
    pb, sb = liveness.parts(b, nd)
    return liveness.make(pa | pb, sa & sb)


def call_block(cb, block: Block, wires: list[Wire], lifted: tuple = ()) -> list[Wire]:  # noqa: C901 - one branch per call feature: repeats, experts, quant, tape, liveness
    """Call a submodule for ``block`` (a loop over a ModuleList when it repeats);
    ``lifted``: the degree axes the call runs over (for shape comments)."""
    reps = repetitions(block, cb.gen.env)
    wires, reversed_axes = flips.settle_call(cb.gen, cb.fw, block, wires, reps > 1)
    tape_before = dict(cb.tape)
    passed = [w for w in wires if w.pairs is not None]
    if passed:
        escape(frozenset().union(*(w.origins for w in passed)),
               "a pairs array passed to a block")
    site = cb.pairs.call_sites
    cb.pairs.call_sites += 1
    info, sel = None, None
    if reps == 1 and not lifted and site not in cb.pairs.excluded:
        info, sel = _pairs_class(cb, block, wires)
    if sel is not None and info.experts is None:
        note_unsliceable(cb.iface.selection, sel, f"block {block.title!r} on the pairs cannot be sliced")
    if info is None:
        info = cb.gen.class_for(block, wires, cb.tape)
    if reps > 1:
        # the class must accept its own outputs: widen its input liveness to a fixpoint
        for _ in range(8):
            outs = [st for _, st, _ in info.outputs]
            if len(outs) != len(wires):
                raise SpecError(f"block {block.title!r} repeats but its domain and codomain "
                                "differ", block.path)
            joined = [_join(a, b) for a, b in zip(info.input_static, outs, strict=False)]
            if all((a is None and b is None) or (a is not None and b is not None
                                                 and a.digest() == b.digest())
                   for a, b in zip(joined, info.input_static, strict=False)):
                break
            probe = [Wire(w.var, w.array, w.live or "?", st, w.full)
                     for w, st in zip(wires, joined, strict=False)]
            info = cb.gen.class_for(block, probe, tape_before)
    snake = attribute_name(info.name, block.title)
    ctor = ["self.config"] if info.ctor_symbols else []
    if info.method:  # holds nothing of its own: a method of the base class, no submodule
        cb.methods.append(info)
        cb.needs.quant = cb.needs.quant or info.needs_quant
    elif info.needs_quant:
        ctor.append("quant=quant")
        cb.needs.passes_quant = True
    if info.needs_stand_in:
        ctor.append("stand_in=stand_in")
        cb.needs.passes_stand_in = True
    if info.needs_static:
        ctor.append("static_shapes=static_shapes")
        cb.needs.passes_static = True
    make = f"{info.name}({', '.join(ctor)})"
    args = []
    for w, st in zip(wires, info.input_static, strict=False):
        args.append(w.var)
        if st is not None:
            args.append(w.live if w.live is not None
                        else f"torch.ones({(1,) * w.rank!r}, dtype=torch.bool)")
    # the rotary tables the callee reads: computed here, once per forward (codegen/rules/sources.py)
    tables = [n for sites, parts in info.tables for n in cb.shared_table(sites, parts)]
    args += tables
    if sel is not None:
        args.append(sel.pairs)
    kwargs = [f"{cb.gen.sym_name(s)}={cb.sizes.fwd_symbol(s)}" for s in info.kw_symbols]
    if info.uses_tape:
        kwargs.append("tape=tape")
        cb.needs.tape = True
    call_args = ", ".join(args + kwargs)
    outs: list[Wire] = []
    names = []
    if sel is not None:
        origins = frozenset({ARGUMENT if sel is cb.iface.selection else site})
    bases = _result_names(cb, info, snake)
    for k, (arr, st, full) in enumerate(info.outputs):
        base = bases[k]
        var = cb.fw.names.fresh(base)
        live = cb.fw.names.fresh(var + "_live") if st is not None else None
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
        if info.method:
            callee, loop_var, over = f"self.{info.method}", "_", \
                f"range({cb.size_code(block.tag.repetition)})"
            cb.fw.comment(f"{comment_text(block.title)}, {reps} times")
        else:
            attr = cb.members.add_sub(snake + "s" if not snake.endswith("s") else snake, info,
                                      make, reps, cb.init_size_code(block.tag.repetition))
            callee = loop_var = cb.fw.names.fresh("block")
            over = f"self.{attr}"
            cb.fw.comment(f"{comment_text(block.title)}, {reps} times with parameters per "
                          "iteration")
        # a method's loop (it holds no parameters; no tables) carries its real values in float32
        # at least, rounded to the forward's dtype once after it (codegen/PRECISION.md)
        wide = [info.method and not tables and kind(w.array.datatype) == "real" for w in outs]
        for w, var, st, widen in zip(wires, outs, info.input_static, wide, strict=False):
            cb.fw.assign(var.var, f"{w.var}.to({dtypes.wide_real(cb.iface.inputs)})" if widen
                         else w.var)
            if st is not None:
                src = w.live if w.live is not None else "True"
                cb.fw.assign(var.live, src)
        loop_args = []
        for w in outs:
            loop_args.append(w.var)
            if w.live is not None:
                loop_args.append(w.live)
        call = ", ".join(loop_args + tables + kwargs)
        with cb.fw.nested(FOR, over, loop_var):
            cb.fw.assign(tuple(names), f"{callee}({call})", shapes)
        for w, widen in zip(outs, wide, strict=False):
            if widen:
                cb.fw.assign(w.var, f"{w.var}.to({dtypes.real_dtype(cb.iface.inputs)})")
    else:
        callee = f"self.{info.method or cb.members.add_sub(snake, info, make)}"
        target = tuple(names) if names else ("_",)
        chunk = chunks.plan(cb, block, wires, info) if names and sel is None else None
        if chunk is not None:
            chunks.call_line(cb, chunk, block, callee, wires, info, target, shapes)
        elif names:
            cb.fw.assign(target, f"{callee}({call_args})", shapes)
        else:
            cb.fw.call(f"{callee}({call_args})")
    cb.tape.update(info.tape_after)
    if cb.batch.source is None:
        for w in outs:
            w.full = False
    return flips.restore_outputs(cb.fw, outs, reversed_axes)

def _pairs_class(cb, block: Block, wires: list[Wire]):
    """(pairs-mode class, selection) for a call whose outputs hold a sparse axis first when
    this function knows the axis's selection, else (None, None)."""
    if cb.batch.source is None or not all(w.full for w in wires):
        return None, None  # the pairs index rows of this function's leading dims
    axes = {}
    for arr in block.cod:
        a = leading_sparse_axis(arr)
        if a is not None:
            axes[a.uid] = a
    for uid in sorted(axes):
        own = cb.iface.selection is not None and cb.iface.selection.axis.uid == uid
        if not own and uid not in cb.pairs.selections and uid not in cb.pairs.masks:
            continue
        saved = cb.gen.snapshot()
        try:
            info = cb.gen.class_for(block, wires, cb.tape, pairs_axis=axes[uid])
        except NotCompact:
            cb.gen.restore(saved)
            continue
        if not any(info.pairs_outputs):
            cb.gen.restore(saved)
            continue
        return info, (cb.iface.selection if own else _selection(cb, axes[uid]))
    return None, None

def _selection(cb, axis) -> Selection:
    """The live pairs of ``axis`` in this function (made once, from its mask)."""
    sel = cb.pairs.selections.get(axis.uid)
    if sel is None:
        mask = cb.pairs.masks[axis.uid]
        cb.gen.prelude.add("pairs")
        label = comment_text(axis.label, 20)
        cb.needs.static = True
        var = cb.fw.bind(identifier(axis.label, "sparse") + "_pairs",
                         f"live_pairs({mask.live}, {cb.lead()}, "
                         f"{cb.sizes.fwd(axis.activity)}, self.static_shapes)",
                         f"the live (row, {label}) pairs")
        sel = Selection(axis, var, mask.live)
        cb.pairs.selections[axis.uid] = sel
    return sel


def _result_names(cb, info, snake: str) -> list[str]:
    """The names of a call's results: the callee's attribute name for one result; for several,
    the names the callee's own code gives them (``shifted, sigmoid, sinkhorn_round =
    self.mixing_coefficients(...)``) where those are distinct identifiers free in the caller,
    less a number they carry, else the attribute name numbered."""
    if len(info.outputs) == 1:
        return [snake]
    own = list(info.output_names)
    for names in ([_unnumbered(n) for n in own], own):  # unnumbered where that is free
        if (len(names) == len(info.outputs) and len(set(names)) == len(names)
                and all(n.isidentifier() and n not in cb.fw.names.taken for n in names)):
            return names
    return [f"{snake}_{k + 1}" for k in range(len(info.outputs))]


def _unnumbered(name: str) -> str:
    """``name`` less the ``_2``-style number a :class:`Namer` gave it."""
    base, sep, tail = name.rpartition("_")
    return base if sep and base and tail.isdigit() else name

