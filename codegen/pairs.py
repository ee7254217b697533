"""Arrays on a data-dependent sparse axis, computed at the live pairs only (docs/format.md §2.4, §5.3,
§11.16-17, §16 item 4).

A ``TopK`` in the WEIGHTS form keeps a few live slots of a :class:`~ir.axes.SparseAxis` (``k/e``)
at every row (token); the rest of the axis is dead. Arrays on that axis built by dense operators
(the routed experts' ``[k/e, f]`` projections) are formally dense, but the only consumer that
reads them is a contraction over the axis against the selection (the gate), where every
unselected term is dead and so left out (law L1). The generator therefore computes them at the
selected (row, slot) pairs only:

* a class that calls a block whose output holds the sparse axis first, and that holds a wire
  carrying a data-dependent mask on that axis (the gate), turns the mask into pairs
  (``live_pairs``) and passes them to the block, which is generated in *pairs mode*;
* in pairs mode a ``Linear`` whose output target holds the axis runs one matrix product per
  slot on the rows routed to it (``pairwise_matmul``); a per-slot ``Linear`` read on its
  diagonal (``W^D`` then ``View<diag>``) likewise; operators that act row by row (formulas,
  casts, products, boxes lifted over the axis) act on the pairs arrays ``[pairs, *rest]``
  unchanged, so the emulate-mode rounding (groups along the trailing, non-sparse axis) is the
  dense array's, row for row;
* the contraction over the axis gathers the gate at the pairs and sums the products back into
  their rows (``add_rows``): dead slots are never read or multiplied.

The pairs come in two forms, chosen at run time: the sparse form holds exactly the live pairs
(counts read off the data: eager only), the static form ``k`` pairs per row with a liveness flag
per pair and the grouped product as the custom op ``ncdc::grouped_matmul`` (every shape fixed by
the input shapes: ``torch.compile(fullgraph=True)`` and ``torch.export``). ``live_pairs`` takes
the static form while torch traces the module and where the constructor switch
``static_shapes`` (threaded through every class that makes or passes on a selection, like
``quant``) asks for it, the sparse form otherwise; see ``prelude/pairs.py``.

Whether that is sound is decided while the code is written, not guessed: a pairs array that
reaches any other use (a block output, the tape, a fold along the axis, a contraction gated by
another mask) aborts the attempt — :class:`NotCompact` makes the callee fall back to its dense
class, :class:`PairsEscape` makes the caller's class be rebuilt with that call dense. Liveness
stays the interpreter's: the gate's mask still decides the contraction's.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

from ncdc.ir.axes import SparseAxis
from ncdc.ir.datatypes import Natural, strip
from ncdc.ir.operators import (
    Arithmetic,
    BlockOperator,
    Cast,
    Einops,
    Elementwise,
    GenericOperator,
    Identity,
    Linear,
    TypeConvert,
)

from .ctx import Ctx
from .emit import align_code, atom
from .escapes import ARGUMENT, NotCompact, PairsEscape, escape
from .experts import note_expert_param, note_unsliceable
from .names import comment_text
from .operands import OpResult
from .place import fusion_relabel, place
from .products import fold_live, group_labels, linear_params
from .reads import read_operand

PAIRS = ("p",)
"""The label of the pairs dim (the leading dims and the sparse axis, merged)."""

ROW_WISE = (Arithmetic, Elementwise, GenericOperator, TypeConvert, Cast, Identity, Einops,
            BlockOperator)
"""Operators whose code acts on a pairs array unchanged when the sparse axis is a degree axis
(every operator is lifted over its degree) or, for the pointwise ones, a target axis."""

POINTWISE = (Arithmetic, Elementwise, GenericOperator, TypeConvert, Cast, Identity)


@dataclass(eq=False)
class Selection:
    """The live pairs of one sparse axis in one generated function."""

    axis: SparseAxis
    pairs: str  # code of the (rows, slots, counts) tuple
    mask: str | None  # the mask variable the pairs were built from (None: a pairs argument)
    gathered: dict = field(default_factory=dict)
    # a pairs argument (pairs mode): the parameters holding the axis, attribute -> its dim, and
    # why the class cannot run on a slice of the axis (None: it can; codegen/experts.py)
    expert_dims: dict = field(default_factory=dict)
    unsliceable: str | None = None

    def take_rows(self, cb, expr: str, rank: int) -> str:
        """``expr`` (an array with the leading dims) at the row of every pair (memoised)."""
        key = (expr, rank)
        if key not in self.gathered:
            cb.gen.prelude.add("pairs")
            base = (expr if expr.isidentifier() else "operand") + "_rows"
            self.gathered[key] = cb.fw.bind(base, f"take_rows({expr}, {rank}, {cb.lead()}, "
                                            f"{self.pairs})", "at the row of every pair")
        return self.gathered[key]


def leading_sparse_axis(array) -> SparseAxis | None:
    """The array's first axis when it is a sparse axis found nowhere else in the array."""
    if not array.shape or not isinstance(array.shape[0], SparseAxis):
        return None
    first = array.shape[0]
    return first if sum(1 for a in array.shape if a == first) == 1 else None


def is_selection_mask(wire) -> bool:
    """A wire on one sparse axis whose liveness is decided by the data (a top-k gate)."""
    return (wire.live is not None and wire.static is not None and wire.pairs is None
            and len(wire.array.shape) == 1 and isinstance(wire.array.shape[0], SparseAxis)
            and not wire.static.sure.all())


def wants_pairs(cb, b, wires) -> bool:
    """Lower ``b`` in pairs form: a pairs array flows in, or (in a pairs-mode class) it is a
    ``Linear`` of an input whose output target holds the selection's axis (a ``Linear`` of
    nothing is a parameter and stays dense)."""
    if any(w.pairs is not None for w in wires):
        return True
    sel = cb.iface.selection
    return (sel is not None and isinstance(b.operator, Linear) and len(wires) == 1
            and len(b.output_weaves) == 1
            and any(a == sel.axis for a in b.output_weaves[0].target))


def lower_on_pairs(cb, b, wires, then, rule):
    """Lower ``b`` (and the fused view ``then``) with pairs arrays: the placed output wires."""
    sels = {id(w.pairs): w.pairs for w in wires if w.pairs is not None}
    origins = frozenset().union(*(w.origins for w in wires if w.pairs is not None))
    if not sels:
        sel, origins = cb.iface.selection, frozenset({ARGUMENT})
    elif len(sels) > 1:
        escape(origins, "pairs arrays of two selections meet")
    else:
        sel = next(iter(sels.values()))
    op = b.operator
    if not isinstance(op, (Linear, *ROW_WISE)):
        escape(origins, f"a {type(op).__name__} reads an array on the sparse axis")
    operands = []
    for k, w in enumerate(wires):
        o = read_operand(cb, b, k, w)
        if w.pairs is not None and (o.expr != w.var or o.live is not None):
            escape(origins, "a pairs array read through an affine map")
        operands.append(o)
    ctx = Ctx(cb, b, operands, relabel=_fusion(b, then), final=then)
    ctx.wires = list(wires)
    ctx.pairs, ctx.pairs_origins, ctx.pairs_axis = sel, origins, sel.axis
    ctx.s_labels = frozenset(_sparse_labels(ctx, then))
    if isinstance(op, Linear):
        results = linear_on_pairs(ctx)
    elif isinstance(op, Einops) and any(a == sel.axis for w in b.input_weaves
                                        for a in w.target):
        if then is not None:
            escape(origins, "a contraction over the sparse axis fused with a view")
        return place(ctx, b, contract_pairs(ctx))
    else:
        if then is not None:
            escape(origins, "a pairs array through a fused view")
        _row_wise_operands(ctx)
        results = rule(ctx)
    return place(ctx, then if then is not None else b, results,
                 deg_tag="v" if then is not None else "d")


def _fusion(b, then):
    return fusion_relabel(b, then) if then is not None else None


def _sparse_labels(ctx, then):
    """Every label of ``ctx`` whose axis is the selection's."""
    b, axis = ctx.b, ctx.pairs_axis
    out = [("d", i) for i, a in enumerate(b.degree) if a == axis]
    for k, w in enumerate(b.input_weaves):
        out += [("t", k, p) for p, a in enumerate(w.target) if a == axis]
    for j, w in enumerate(b.output_weaves):
        out += [("o", j, p) for p, a in enumerate(w.target) if a == axis]
    if then is not None:
        out += [("v", i) for i, a in enumerate(then.degree) if a == axis]
    return out


def _row_wise_operands(ctx) -> None:
    """Put every operand in pairs form for a row-wise rule: a pairs array's sparse label
    becomes the pairs dim; a dense operand with the leading dims is gathered at the rows of the
    pairs (or, if it holds the sparse axis, at the pairs); a parameter broadcasts as it is."""
    cb, sel, origins = ctx.cb, ctx.pairs, ctx.pairs_origins
    sparse_deg = [lab for lab in ctx.deg_labels if lab in ctx.s_labels]
    if len(sparse_deg) > 1:
        escape(origins, "the sparse axis twice in a degree")
    pointwise = isinstance(ctx.op, POINTWISE)
    for _k, (o, w) in enumerate(zip(ctx.ops, ctx.wires, strict=False)):
        sparse = [i for i, lab in enumerate(o.labels) if lab in ctx.s_labels]
        if len(sparse) > 1 or len(set(o.labels)) != len(o.labels):
            escape(origins, "the sparse axis read on a diagonal")
        if sparse and o.labels[sparse[0]][0] == "t" and not (
                pointwise or (isinstance(ctx.op, BlockOperator) and not ctx.deg_labels)):
            escape(origins, f"a {type(ctx.op).__name__} folds or mixes the sparse axis")
        if w.pairs is not None:
            if sparse != [0]:
                escape(origins, "a pairs array whose first dim is not the sparse axis")
            o.labels = [PAIRS] + o.labels[1:]
        elif o.live is not None:
            escape(origins, "a masked operand next to a pairs array")
        elif sparse:
            s = o.labels[sparse[0]]
            rest = [lab for lab in o.labels if lab != s]
            moved = align_code(o.expr, o.labels, [s] + rest)
            cb.gen.prelude.add("pairs")
            note_unsliceable(cb.iface.selection, sel, "an array on the sparse axis read at the pairs")
            o.expr = ctx.bind((o.expr if o.expr.isidentifier() else "operand") + "_pairs",
                              f"take_pairs({moved}, {len(o.labels)}, {cb.lead()}, "
                              f"{sel.pairs})", [PAIRS] + rest, "at the pairs")
            o.labels = [PAIRS] + rest
        elif o.full:
            o.expr = sel.take_rows(cb, o.expr, len(o.labels))
            o.labels = [PAIRS] + o.labels
        o.full = False
    ctx.deg_labels = [ctx.pl(lab) for lab in ctx.deg_labels]


def linear_on_pairs(ctx):
    """A ``Linear`` whose output target holds the sparse axis, at the pairs: its input is the
    row of each pair (no sparse axis in it) or, for a per-slot ``Linear`` read on its diagonal,
    a pairs array; one matrix product per slot with the slot's weight slice."""
    b, cb, sel, origins = ctx.b, ctx.cb, ctx.pairs, ctx.pairs_origins
    axis = sel.axis
    if len(ctx.ops) != 1 or isinstance(strip(b.input_weaves[0].datatype), Natural):
        escape(origins, "a Linear without one real input")
    out_target = b.output_weaves[0].target
    qs = [p for p, a in enumerate(out_target) if a == axis]
    if len(qs) != 1 or any(a == axis for a in b.input_weaves[0].target):
        escape(origins, "a Linear that folds the sparse axis or holds it twice")
    q = qs[0]
    o, w = ctx.ops[0], ctx.wires[0]
    in_labels = [("t", 0, p) for p in range(len(b.input_weaves[0].target))]
    out_labels = [("o", 0, p) for p in range(len(out_target))]
    sparse_out = ("o", 0, q)
    if w.pairs is not None:
        # a Linear per slot (the sparse axis in the degree) whose result is read on the
        # diagonal: the pair's own slot only
        if not o.labels or o.labels[0] not in ctx.s_labels or o.labels[1:] != in_labels:
            escape(origins, "a per-slot Linear whose input has other dims")
        if not ctx.relabel or ctx.rel(o.labels[0]) != ctx.rel(sparse_out):
            escape(origins, "a per-slot Linear not read on its diagonal")
        x = o.expr
    else:
        if any(a == axis for a in b.degree) or o.live is not None or o.labels != in_labels:
            escape(origins, "a Linear into the sparse axis from an input with other dims")
        if ctx.relabel:
            escape(origins, "a Linear into the sparse axis fused with a view")
        x = sel.take_rows(cb, o.expr, len(in_labels))
    if b.operator.bias and q != 0:
        escape(origins, "a bias whose sparse axis is not its first")
    weight, bias, base = linear_params(ctx, in_labels, out_labels)
    weight = cb.members.stored.get(weight, weight)  # stored: dequantized a slot at a time
    note_expert_param(cb.iface.selection, sel, weight, len(in_labels) + q)
    slot_major(cb.members, weight, len(in_labels) + q)
    if bias is not None:
        note_expert_param(cb.iface.selection, sel, cb.members.stored.get(bias, bias), 0)
    cb.gen.prelude.add("pairs")
    code = f"pairwise_matmul({x}, {weight}, {len(in_labels) + q}, {sel.pairs})"
    if bias is not None:
        code = f"{code} + {bias}.index_select(0, {sel.pairs}[1])"
    labels = [PAIRS] + [ctx.rel(lab) for lab in out_labels if lab != sparse_out]
    var = ctx.bind(f"{base}_out", code, labels, "at the pairs")
    return [OpResult(var, labels)]


def slot_major(members, weight: str, dim: int) -> None:
    """Allocate the parameter ``weight`` (its code, ``self.<attr>``) one slot of its sparse dim
    ``dim`` after another in memory (prelude ``by_slot``): its shape (and state_dict) stay the
    interpreter's, and every slot's slice, the operand of one product of ``pairwise_matmul``,
    is one contiguous matrix (read in place by ``torch._grouped_mm``; a slice strided by the
    whole axis reads slower)."""
    for i, st in enumerate(members.init):
        call = ast.parse(st.expr, mode="eval").body if st.targets == (weight,) else None
        if (dim and isinstance(call, ast.Call) and ast.unparse(call.func) == "nn.Parameter"
                and isinstance(call.args[0], ast.Call) and not call.args[0].keywords
                and ast.unparse(call.args[0].func) == "torch.empty"):
            members.init[i] = replace(st, expr=st.expr.replace("torch.empty(",
                                                                f"by_slot({dim}, ", 1))


def contract_pairs(ctx):
    """An ``Einops`` contraction over the sparse axis with a pairs array: every dense operand
    holding the axis is read at the pairs (one must carry the selection's mask, so the terms
    left out are exactly the dead ones), the terms are multiplied per pair and summed into
    their rows."""
    cb, sel, origins = ctx.cb, ctx.pairs, ctx.pairs_origins
    relabelled = group_labels(ctx)
    sparse_groups = {lab for k, labs in enumerate(relabelled)
                     for lab, orig in zip(labs, ctx.ops[k].labels, strict=False) if orig in ctx.s_labels}
    if len(sparse_groups) != 1:
        escape(origins, "the sparse axis in a contraction's degree")
    (group,) = sparse_groups
    lead = cb.lead()
    terms, gated = [], False
    for k, (o, w) in enumerate(zip(ctx.ops, ctx.wires, strict=False)):
        labs = relabelled[k]
        if len(set(labs)) != len(labs):
            escape(origins, "a contraction with a diagonal term")
        if w.pairs is not None:
            if labs[0] != group:
                escape(origins, "a pairs array whose first dim is not the sparse axis")
            terms.append((o.expr, [PAIRS] + labs[1:], False))
        elif group in labs:
            if o.live is not None:
                if o.live != sel.mask:
                    escape(origins, "a contraction gated by another mask than the selection's")
                gated = True
            rest = [lab for lab in labs if lab != group]
            moved = align_code(o.expr, labs, [group] + rest)
            cb.gen.prelude.add("pairs")
            note_unsliceable(cb.iface.selection, sel, "an array on the sparse axis read at the pairs")
            code = ctx.bind((o.expr if o.expr.isidentifier() else "operand") + "_pairs",
                            f"take_pairs({moved}, {len(labs)}, {lead}, {sel.pairs})",
                            [PAIRS] + rest, "at the pairs")
            terms.append((code, [PAIRS] + rest, False))
        elif o.live is not None:
            escape(origins, "a masked operand next to a pairs array")
        elif o.full:
            terms.append((sel.take_rows(cb, o.expr, len(labs)), [PAIRS] + labs, False))
        else:
            terms.append((o.expr, labs, False))
    if not gated:
        escape(origins, "a contraction over the sparse axis that its selection does not gate")
    out = [lab for lab in ctx.deg_labels if any(lab in t[1] for t in terms)]
    code = _per_pair_product(ctx, terms, [PAIRS] + out)
    per_pair = ctx.bind("terms", code, [PAIRS] + out, "per pair")
    cb.gen.prelude.add("pairs")
    var = ctx.bind("contraction", f"add_rows({per_pair}, {lead}, {sel.pairs})", out,
                   f"summed over the live {comment_text(sel.axis.label, 20)}")
    groups = list(dict.fromkeys(lab for labs in relabelled for lab in labs if lab[0] == "g"))
    live, static = fold_live(ctx, relabelled, groups, out)
    if live is not None:
        live = ctx.bind(var + "_live", live)
    return [OpResult(var, out, live, static, full=True)]


def _per_pair_product(ctx, terms, out) -> str:
    """The terms multiplied per pair: two terms that share every label they hold with ``out``
    (nothing summed) as one broadcast product, the value ``torch.einsum`` gives (it multiplies
    them so) without its planning on every call; else ``torch.einsum``."""
    if len(terms) == 2 and all(set(t[1]) <= set(out) and len(set(t[1])) == len(t[1])
                               for t in terms):
        return " * ".join(atom(align_code(t[0], t[1], out)) for t in terms)
    return ctx.einsum(terms, out)


__all__ = [
    "ARGUMENT",
    "NotCompact",
    "PairsEscape",
    "Selection",
    "contract_pairs",
    "escape",
    "is_selection_mask",
    "leading_sparse_axis",
    "linear_on_pairs",
    "lower_on_pairs",
    "wants_pairs",
]
