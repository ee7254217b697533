"""Checks of ``Broadcasted`` terms: the weave/reindexing invariants of docs/format.md §9.4, box
ports (§10.4–§10.5) and cheap per-operator arity, rank and datatype rules (§11).

Codes: ``weave-degree`` (TILED slot counts, one reindexing per input), ``reindexing-domain``
(reindexings that do not share one domain of axes), ``backup-degree`` (present with inputs /
absent without), ``box-arity`` / ``box-port`` (a box's weaves vs its block's dom/cod),
``datatype-leniency`` (warning: datatypes equal only after stripping quantisation, §2.5),
``operator-arity`` (number of operands/results), ``operator-rank`` (target ranks),
``operator-type`` (datatype kinds), ``einops-group`` (one group over axes of different sizes),
``unknown-elementwise`` (an older-generation elementwise function no evaluator knows).
"""
from __future__ import annotations

import sympy
from ncdc.ir import operators as ops
from ncdc.ir.arrays import TILED, Array
from ncdc.ir.axes import Axis
from ncdc.ir.datatypes import compatible, kind
from ncdc.ir.errors import BindingError
from ncdc.ir.morphisms import Broadcasted, Morphism
from ncdc.ir.shapes import axis_labels, compare_objects, objects_text


def check_broadcasted(ck, b: Broadcasted, path: str, titles) -> None:
    ins, outs, rxs = b.input_weaves, b.output_weaves, b.reindexings
    ok = True
    if len(rxs) != len(ins):
        ck.error("weave-degree", f"{len(ins)} input weave(s) but {len(rxs)} reindexing(s); one "
                 "reindexing per input", path + ".reindexings", titles)
        ok = False
    doms = []
    for k, rx in enumerate(rxs):
        if not isinstance(rx, Morphism):
            continue
        dom, cod = ck.typed(rx, "dom"), ck.typed(rx, "cod")
        if dom is None or cod is None:
            ok = False
            continue
        if not all(isinstance(a, Axis) for a in dom + cod):
            ck.error("reindexing-domain", f"reindexing {k} maps arrays, not axes: "
                     f"{objects_text(dom)} -> {objects_text(cod)}", f"{path}.reindexings[{k}]",
                     titles)
            ok = False
            continue
        doms.append((k, dom))
        if k < len(ins) and ins[k].tiled_count != len(cod):
            ck.error("weave-degree", f"input {k}: the weave {ins[k]} has {ins[k].tiled_count} "
                     f"TILED slot(s) but its reindexing gives {len(cod)} axis/axes "
                     f"{objects_text(cod)}", f"{path}.input_weaves[{k}]", titles,
                     axis_labels(cod))
            ok = False
    if doms:
        k0, d0 = doms[0]
        for k, d in doms[1:]:
            if tuple(a.uid for a in d) != tuple(a.uid for a in d0):
                ck.error("reindexing-domain", f"reindexing {k} has domain {objects_text(d)} but "
                         f"reindexing {k0} has {objects_text(d0)}; all share the degree",
                         f"{path}.reindexings[{k}]", titles, axis_labels(d + d0))
                ok = False
    if ins and b.backup_degree is not None:
        ck.error("backup-degree", "backup_degree must be null when there are inputs",
                 path + ".backup_degree", titles)
    if not ins and b.backup_degree is None:
        ck.warning("backup-degree", "no inputs and no backup_degree: the degree is taken as ()",
                   path, titles)
    degree = doms[0][1] if doms else tuple(b.backup_degree or ())
    for j, w in enumerate(outs):
        if w.tiled_count != len(degree):
            ck.error("weave-degree", f"output {j}: the weave {w} has {w.tiled_count} TILED "
                     f"slot(s) but the degree {objects_text(degree)} has {len(degree)}",
                     f"{path}.output_weaves[{j}]", titles, axis_labels(degree))
            ok = False
    check_operator(ck, b, path, titles, typed_ok=ok)


# --------------------------------------------------------------------------- operators


def _targets(weaves) -> list[Array]:
    return [w.target_array() for w in weaves]


def _need(ck, b, path, titles, n_in=None, n_out=None, min_in=None) -> bool:
    name = type(b.operator).__name__
    n, m = len(b.input_weaves), len(b.output_weaves)
    if (n_in is not None and n != n_in) or (min_in is not None and n < min_in):
        want = n_in if n_in is not None else f"at least {min_in}"
        ck.error("operator-arity", f"{name} takes {want} operand(s), this one has {n}",
                 path + ".input_weaves", titles)
        return False
    if n_out is not None and m != n_out:
        ck.error("operator-arity", f"{name} gives {n_out} result(s), this one has {m}",
                 path + ".output_weaves", titles)
        return False
    return True


def _rank(ck, b, path, titles, side: str, k: int, want: int, what: str) -> bool:
    w = (b.input_weaves if side == "input" else b.output_weaves)[k]
    got = len(w.target)
    if got != want:
        field = "input_weaves" if side == "input" else "output_weaves"
        ck.error("operator-rank", f"{type(b.operator).__name__}: {side} {k} should have "
                 f"{what} ({want} target axis/axes), the weave {w} has {got}",
                 f"{path}.{field}[{k}]", titles, tuple(a.label for a in w.target))
        return False
    return True


def _tensor_equation(ck, b, path, titles) -> None:
    """Each left-hand index is a degree axis; each input weave is its TensorRef's axes with the
    left-hand ones TILED (FORMAT-external: pyncd's ``bc_signature``)."""
    op, degree = b.operator, tuple(b.degree)
    for i, a in enumerate(op.lhs_indices):
        if a not in degree:
            ck.error("operator-rank", f"TensorEquation: left-hand index {a.label} is not an axis "
                     "of the box's degree", f"{path}.operator.lhs_indices[{i}]", titles)
    kept = set(op.lhs_indices)
    for k, (ref, w) in enumerate(zip(op.refs, b.input_weaves)):
        want = tuple(TILED if a in kept else a for a in ref.axes)
        if len(want) != len(w.shape) or any(
                (x is TILED) != (y is TILED) or (x is not TILED and x != y)
                for x, y in zip(want, w.shape)):
            name = ref.name.text if ref.name is not None else "?"
            slots = ", ".join("*" if a is TILED else a.label for a in want)
            ck.error("operator-rank", f"TensorEquation: input {k} ({name}"
                     f"[{', '.join(a.label for a in ref.axes)}]) needs the weave [{slots}] "
                     f"(left-hand axes TILED), not {w}", f"{path}.input_weaves[{k}]", titles,
                     tuple(a.label for a in w.target))


def _same_target(ck, b, path, titles) -> None:
    a, c = b.input_weaves[0].target, b.output_weaves[0].target
    if tuple(x.uid for x in a) != tuple(x.uid for x in c):
        ck.error("operator-rank", f"{type(b.operator).__name__} keeps its target axes, but "
                 f"maps [{', '.join(x.label for x in a)}] to [{', '.join(x.label for x in c)}]",
                 path + ".output_weaves[0]", titles, axis_labels(
                     (Array(b.input_weaves[0].datatype, a), Array(b.output_weaves[0].datatype, c))))


def _all_tiled(ck, b, path, titles) -> None:
    for side, weaves in (("input", b.input_weaves), ("output", b.output_weaves)):
        for k in range(len(weaves)):
            if not _rank(ck, b, path, titles, side, k, 0, "only TILED slots"):
                return


def _kind_is(ck, b, path, titles, k: int, want: str) -> None:
    w = b.input_weaves[k]
    if kind(w.datatype) != want:
        ck.error("operator-type", f"{type(b.operator).__name__}: input {k} must be {want}, "
                 f"the weave says {w.datatype}", f"{path}.input_weaves[{k}]", titles)


def _ports(ck, b, path, titles, dom, cod, what: str) -> None:
    """A box's weave targets against its block's dom/cod (docs/format.md §10.4, §2.5)."""
    for side, weaves, objs in (("input", b.input_weaves, dom), ("output", b.output_weaves, cod)):
        if objs is None:
            continue
        targets = _targets(weaves)
        field = "input_weaves" if side == "input" else "output_weaves"
        if len(targets) != len(objs):
            ck.error("box-arity", f"{what}: {len(targets)} {side} weave(s) "
                     f"{objects_text(targets)} but the block has {len(objs)} "
                     f"{objects_text(objs)}", f"{path}.{field}", titles,
                     axis_labels(tuple(targets) + tuple(objs)))
            continue
        for prob in compare_objects(objs, targets):
            where = f"{path}.{field}[{prob.position}]"
            if prob.kind == "leniency":
                ck.warning("datatype-leniency", f"{what}: {side} port {prob.position}: the block "
                           f"says {prob.left} but the weave says {prob.right.datatype} (equal "
                           "after stripping quantisation, docs/format.md §2.5)", where, titles,
                           prob.axes_involved())
            else:
                ck.error("box-port", f"{what}: {side} port {prob.position}: the block has "
                         f"{prob.left} but the weave target is {prob.right}", where, titles,
                         prob.axes_involved())


def _group_sizes(ck, b, path, titles, sig) -> None:
    groups: dict[int, list[Axis]] = {}
    for k, entry in enumerate(sig):
        for g, axis in zip(entry, b.input_weaves[k].target):
            groups.setdefault(g, []).append(axis)
    for g, axes in sorted(groups.items()):
        first = axes[0]
        for other in axes[1:]:
            if other.uid == first.uid or other.size == first.size:
                continue
            differ = None
            if ck.env is not None:
                try:
                    differ = ck.env.size(first.size) != ck.env.size(other.size)
                except BindingError:
                    differ = None
            if differ is None:
                d = sympy.simplify(first.size - other.size)
                differ = bool(d.is_number and d != 0)
            if differ:
                ck.error("einops-group", f"Einops group {g} joins axes of different sizes: "
                         f"{first.label} ({sympy.sstr(first.size)}) and {other.label} "
                         f"({sympy.sstr(other.size)})", path + ".operator.signature", titles,
                         (first.label, other.label))
                return


def check_operator(ck, b: Broadcasted, path: str, titles, typed_ok: bool = True) -> None:
    op = b.operator
    n_in = len(b.input_weaves)
    if isinstance(op, ops.Einops):
        if not _need(ck, b, path, titles, n_out=1):
            return
        _rank(ck, b, path, titles, "output", 0, 0, "only TILED slots")
        sig = op.signature
        if len(sig) != n_in:
            ck.error("operator-arity", f"Einops signature has {len(sig)} entries for {n_in} "
                     "operand(s)", path + ".operator.signature", titles)
            return
        good = True
        for k, entry in enumerate(sig):
            t = b.input_weaves[k].target
            if len(entry) != len(t):
                ck.error("operator-rank", f"Einops signature entry {k} names {len(entry)} "
                         f"group(s) but input {k} has {len(t)} target axis/axes "
                         f"[{', '.join(a.label for a in t)}]",
                         f"{path}.operator.signature[{k}]", titles, tuple(a.label for a in t))
                good = False
        if good:
            _group_sizes(ck, b, path, titles, sig)
    elif isinstance(op, ops.Linear):
        _need(ck, b, path, titles, n_out=1)
    elif isinstance(op, ops.TensorEquation):
        if _need(ck, b, path, titles, n_in=len(op.refs), n_out=1):
            _rank(ck, b, path, titles, "output", 0, 0, "only TILED slots")
            _tensor_equation(ck, b, path, titles)
    elif isinstance(op, ops.Embedding):
        if _need(ck, b, path, titles, n_in=1, n_out=1) and \
                _rank(ck, b, path, titles, "input", 0, 0, "a rank-0 index"):
            _kind_is(ck, b, path, titles, 0, "natural")
    elif isinstance(op, (ops.Normalize, ops.SoftMax)):
        if _need(ck, b, path, titles, n_in=1, n_out=1):
            _same_target(ck, b, path, titles)
    elif isinstance(op, ops.L1Norm):
        if _need(ck, b, path, titles, n_in=1, n_out=1) and \
                _rank(ck, b, path, titles, "input", 0, 1, "one target axis"):
            _same_target(ck, b, path, titles)
    elif isinstance(op, (ops.Maximum, ops.BitwiseXor)):
        if _need(ck, b, path, titles, n_in=1, n_out=1):
            _rank(ck, b, path, titles, "input", 0, 1, "one target axis")
            _rank(ck, b, path, titles, "output", 0, 0, "a rank-0 result")
            if isinstance(op, ops.BitwiseXor):
                _kind_is(ck, b, path, titles, 0, "natural")
    elif isinstance(op, (ops.Arithmetic, ops.Elementwise, ops.Cast, ops.Identity,
                         ops.GenericOperator)):
        if _need(ck, b, path, titles, n_in=1, n_out=1):
            _all_tiled(ck, b, path, titles)
        if isinstance(op, ops.Elementwise) and op.function == "unknown":
            ck.warning("unknown-elementwise", f"elementwise operator {op.label!r}: no known "
                       "function of that name; evaluating it is an error", path + ".operator",
                       titles)
    elif isinstance(op, ops.TypeConvert):
        if _need(ck, b, path, titles, n_in=1, n_out=1):
            _convert_fields(ck, b, path, titles)
    elif isinstance(op, ops.Modulo):
        if _need(ck, b, path, titles, n_in=2, n_out=1):
            _all_tiled(ck, b, path, titles)
    elif isinstance(op, ops.AdditionOp):
        if _need(ck, b, path, titles, min_in=1, n_out=1):
            _all_tiled(ck, b, path, titles)
    elif isinstance(op, ops.TopK):
        if _need(ck, b, path, titles, min_in=1):
            _rank(ck, b, path, titles, "input", 0, 1, "one target axis")
    elif isinstance(op, ops.View):
        if _need(ck, b, path, titles, n_in=1, n_out=1):
            _all_tiled(ck, b, path, titles)
    elif isinstance(op, ops.WeightedTriangularLower):
        if _need(ck, b, path, titles, n_in=1, n_out=1):
            _rank(ck, b, path, titles, "input", 0, 2, "a square target")
    elif isinstance(op, (ops.ConcatenateAxes, ops.DeconcatenateAxes)):
        parts = len(op.part_reindexings)
        if isinstance(op, ops.ConcatenateAxes):
            _need(ck, b, path, titles, n_in=parts, n_out=1)
        else:
            _need(ck, b, path, titles, n_in=1, n_out=parts)
    elif isinstance(op, (ops.Rotary, ops.FixedArray)):
        _need(ck, b, path, titles, n_in=0, n_out=1)
    elif isinstance(op, ops.CovariantView):
        if _need(ck, b, path, titles, n_out=1):
            _covariant(ck, b, path, titles)
    elif isinstance(op, ops.ParaBlockOperator):
        blk = op.block
        dom, cod = ck.typed(blk, "dom"), ck.typed(blk, "cod")
        if dom is not None:
            dom = tuple(g.size for g in op.grabs) + tuple(dom)
        if cod is not None:
            cod = tuple(cod) + tuple(d.size for d in op.drops)
        _ports(ck, b, path, titles, dom, cod, f"box {_box_name(op)}")
    elif isinstance(op, ops.BlockOperator):
        blk = op.block
        _ports(ck, b, path, titles, ck.typed(blk, "dom"), ck.typed(blk, "cod"),
               f"box {_box_name(op)}")


def _box_name(op) -> str:
    title = getattr(op.block, "title", None)
    label = op.label
    if title and label and label != title:
        return f"{label} ({title!r})"
    return repr(title or label or type(op).__name__)


def _convert_fields(ck, b, path, titles) -> None:
    """``source``/``target`` against the weaves: equal, or equal after stripping quantisation
    (a ``datatype-leniency`` warning: trust the weave for typing, docs/format.md §11.21)."""
    op = b.operator
    for field, declared, w, wfield in (("source", op.source, b.input_weaves[0], "input_weaves"),
                                       ("target", op.target, b.output_weaves[0],
                                        "output_weaves")):
        if declared is None or declared == w.datatype:
            continue
        if compatible(declared, w.datatype):
            ck.warning("datatype-leniency", f"TypeConvert {field} says {declared} but the "
                       f"{wfield[:-7]} weave says {w.datatype} (equal after stripping "
                       "quantisation, docs/format.md §2.5)", f"{path}.operator.{field}", titles)
        else:
            ck.error("operator-type", f"TypeConvert {field} {declared} is incompatible with "
                     f"the weave's {w.datatype}", f"{path}.operator.{field}", titles)


def _covariant(ck, b, path, titles) -> None:
    """The scatter's index map: its codomain is the output target; the input target is a
    leading part of its domain (docs/format.md §11.14)."""
    rx = b.operator.reindexing
    dom, cod = ck.typed(rx, "dom"), ck.typed(rx, "cod")
    if dom is None or cod is None:
        return
    out_t = b.output_weaves[0].target
    if tuple(a.uid for a in cod) != tuple(a.uid for a in out_t):
        ck.error("operator-rank", f"CovariantView writes {objects_text(cod)} but the output "
                 f"target is [{', '.join(a.label for a in out_t)}]", path + ".operator.reindexing",
                 titles, axis_labels(cod) + tuple(a.label for a in out_t))
    if b.input_weaves:
        in_t = b.input_weaves[0].target
        if tuple(a.uid for a in dom[:len(in_t)]) != tuple(a.uid for a in in_t):
            ck.error("operator-rank", f"CovariantView reads {objects_text(dom)} but the input "
                     f"target is [{', '.join(a.label for a in in_t)}]",
                     path + ".operator.reindexing", titles,
                     axis_labels(dom) + tuple(a.label for a in in_t))


__all__ = ["check_broadcasted", "check_operator"]
