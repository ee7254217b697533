"""Lowering of one ``Broadcasted`` (FORMAT.md §9): read every input through its reindexing, let
the operator's rule compute on the target dims, place the results into the output weaves.

Dims are tracked by *labels*: ``("d", i)`` is degree dim ``i``, ``("t", k, p)`` target position
``p`` of input ``k``, ``("o", j, p)`` target position ``p`` of output ``j``. A reindexing that is
a plain relabelling (the common case) costs no code at all: the input's dims just get degree
labels, and rules consume labelled operands directly (einsum subscripts) or aligned with views
(``transpose``, ``torch.diagonal``, ``[..., None]``). Windows, groups and shifted reads become
``unflatten`` or a strided view of the padded source (``affine_read``), with a liveness mask
only where a read can fall outside the source.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np
from ncdc.ir.arrays import TILED
from ncdc.ir.datatypes import kind, storage_encoding
from ncdc.ir.errors import SpecError
from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.operators import (
    Einops,
    Linear,
    View,
)
from ncdc.ir.storage import block_scale, output_format

from . import liveness
from .affine import affine_map, simple_source
from .emit import align_code, atom, einsum_letters
from .names import comment_text, identifier
from .wires import Wire


@dataclass
class Operand:
    """Input ``k`` of a Broadcasted after its reindexing: trailing dims labelled."""

    expr: str
    labels: list
    live: str | None
    static: tuple | None  # (possible, sure) arrays, dims in label order
    full: bool
    datatype: object


@dataclass
class OpResult:
    expr: str
    labels: list
    live: str | None = None
    static: tuple | None = None
    full: bool | None = None
    slot: int | None = None  # the value is this tape slot's, unchanged


class Ctx:
    """What a rule sees: the Broadcasted, its operands and code-emission helpers."""

    def __init__(self, cb, b: Broadcasted, operands: list[Operand], relabel: dict | None = None,
                 final: Broadcasted | None = None):
        self.cb = cb
        self.gen = cb.gen
        self.fw = cb.fw
        self.b = b
        self.op = b.operator
        self.ops = operands
        self.deg_labels = [("d", i) for i in range(len(b.degree))]
        self.group_axes: dict = {}
        self.relabel = relabel or {}
        self.final = final
        self.wires: list[Wire] = []
        # pairs form (codegen/pairs.py): the selection, where its arrays come from, and the
        # labels of its sparse axis (all read as the one pairs dim ``("p",)``)
        self.pairs = None
        self.pairs_origins: frozenset = frozenset()
        self.pairs_axis = None
        self.s_labels: frozenset = frozenset()

    # -- labels ------------------------------------------------------------------------------
    def axis(self, lab):
        tag = lab[0]
        if tag == "d":
            return self.b.degree[lab[1]]
        if tag == "t":
            return self.b.input_weaves[lab[1]].target[lab[2]]
        if tag == "o":
            return self.b.output_weaves[lab[1]].target[lab[2]]
        if tag == "v":
            return self.final.degree[lab[1]]
        if tag == "g":
            return self.group_axes[lab]
        if tag == "p":
            return self.pairs_axis
        raise AssertionError(lab)

    def pl(self, lab):
        """``lab``, or the pairs dim when it stands for the selection's sparse axis."""
        return ("p",) if lab in self.s_labels else lab

    def size(self, lab) -> str:
        return self.cb.axis_size(self.axis(lab))

    def ref(self, lab) -> int:
        return self.gen.ref_size(self.axis(lab).size)

    def spanned(self) -> list:
        """Degree labels some operand carries, in degree order."""
        have = {lab for o in self.ops for lab in o.labels}
        return [lab for lab in self.deg_labels if lab in have]

    def any_full(self) -> bool:
        return any(o.full for o in self.ops)

    @property
    def label_name(self) -> str:
        return identifier(self.op.label, "value") if self.op.label else ""

    def name(self, base: str) -> str:
        return base

    # -- alignment -----------------------------------------------------------------------------
    def aligned(self, k: int, dst: list, expand: bool = False) -> str:
        """Operand ``k`` with its trailing dims in the order ``dst`` (missing -> size 1, or
        expanded to full size with ``expand``)."""
        o = self.ops[k]
        code = align_code(o.expr, o.labels, dst)
        if expand:
            code = self.expand(code, dst, present=set(o.labels), full=o.full)
        return code

    def expand(self, code: str, dst: list, present: set, full: bool) -> str:
        missing = [lab for lab in dst if lab not in present]
        lead = self.cb.lead()
        if not missing and (full or lead is None):
            return code
        sizes = [self.size(lab) if lab not in present else "-1" for lab in dst]
        prefix = ["*lead"] if lead is not None else []
        return atom(code) + f".expand({', '.join(prefix + sizes)})"

    def aligned_live(self, k: int, dst: list) -> str | None:
        o = self.ops[k]
        if o.live is None:
            return None
        return align_code(o.live, o.labels, dst)

    def static_of(self, k: int, dst: list) -> tuple[np.ndarray, np.ndarray]:
        o = self.ops[k]
        if o.static is None:
            return liveness.full(len(dst)), liveness.full(len(dst))
        return (liveness.align(o.static[0], o.labels, dst),
                liveness.align(o.static[1], o.labels, dst))

    def shape_comment(self, labels: list) -> str:
        return "[" + ", ".join(comment_text(self.axis(lab).label, 20) for lab in labels) + "]"

    def bind(self, base: str, expr: str, labels: list | None = None, note: str = "") -> str:
        comment = self.shape_comment(labels) if labels is not None else ""
        if note:
            comment = f"{comment} {note}".strip()
        return self.fw.bind(base, expr, comment or None)

    # -- liveness helpers ------------------------------------------------------------------------
    def masked(self) -> list[int]:
        return [k for k, o in enumerate(self.ops) if o.live is not None]

    def product_live(self, dst: list, ks: list[int] | None = None):
        """Dead iff any operand is dead (pointwise products): (code, static) aligned to dst."""
        ks = self.masked() if ks is None else [k for k in ks if self.ops[k].live is not None]
        if not ks:
            return None, None
        pos = liveness.full(len(dst))
        sure = liveness.full(len(dst))
        for k in ks:
            p, s = self.static_of(k, dst)
            pos, sure = pos & p, sure & s
        if liveness.make(pos, sure) is None:
            return None, None
        code = " & ".join(self.aligned_live(k, dst) for k in ks)
        return code, (pos, sure)

    def fold_static(self, static, labels: list, folded: list, keep: list):
        """Fold liveness over ``folded`` labels: live iff some folded term is live."""
        if static is None:
            return None
        axes = tuple(labels.index(lab) for lab in folded)
        pos = static[0].any(axis=axes, keepdims=True) if axes else static[0]
        sure = static[1].any(axis=axes, keepdims=True) if axes else static[1]
        rest = [lab for lab in labels if lab not in folded]
        pos = pos.reshape([n for i, n in enumerate(pos.shape) if i not in axes])
        sure = sure.reshape([n for i, n in enumerate(sure.shape) if i not in axes])
        return (liveness.align(pos, rest, keep), liveness.align(sure, rest, keep))

    def where_live(self, live: str, value: str, fill: str = "0") -> str:
        return f"torch.where({live}, {value}, {fill})"

    # -- einsum --------------------------------------------------------------------------------
    def einsum(self, terms: list[tuple], out: list) -> str:
        """``torch.einsum`` code over labelled terms ``(code, labels[, batched])``; leading
        (batch) dims of batched terms broadcast via ``...``."""
        order = [lab for t in terms for lab in t[1]] + list(out)
        letters = einsum_letters(order, lambda lab: self.axis(lab).label)
        ins = ",".join(("..." if (len(t) < 3 or t[2]) else "")
                       + "".join(letters[lab] for lab in t[1]) for t in terms)
        batched = any(len(t) < 3 or t[2] for t in terms)
        spec = f"{ins}->{'...' if batched else ''}{''.join(letters[lab] for lab in out)}"
        return f"torch.einsum({spec!r}, {', '.join(t[0] for t in terms)})"

    def rel(self, lab):
        return self.relabel.get(lab, lab)


# -- reading operands ----------------------------------------------------------------------------
def read_operand(cb, b: Broadcasted, k: int, wire: Wire) -> Operand:
    weave = b.input_weaves[k]
    rx = b.reindexings[k]
    amap = affine_map(rx, constraints_ok=True)
    array = wire.array
    if len(array.shape) != len(weave.shape):
        raise SpecError(f"input {k} has {len(array.shape)} dims but its weave has "
                        f"{len(weave.shape)}", b.path)
    labels: list = [None] * len(weave.shape)
    t = 0
    for pos, a in enumerate(weave.shape):
        if a is not TILED:
            labels[pos] = ("t", k, t)
            t += 1
    tiled = weave.tiled_positions
    if len(tiled) != len(amap.cod):
        raise SpecError(f"input {k}: {len(tiled)} TILED slots for a reindexing with "
                        f"{len(amap.cod)} codomain axes", b.path)
    gen = cb.gen

    def sizes(axis):
        return gen.size(axis.size), gen.ref_size(axis.size)

    general = []
    for j, pos in enumerate(tiled):
        i = simple_source(amap, j, sizes)
        if i is not None:
            labels[pos] = ("d", i)
        else:
            general.append(j)
    expr, live, full = wire.var, wire.live, wire.full
    static = None
    if wire.static is not None:
        static = (wire.static.possible, wire.static.sure)
    if general:
        expr, labels, live, static = _general_read(cb, b, k, amap, labels, tiled, general,
                                                   expr, live, static)
    if amap.constraints:
        expr, labels, live, static = _constrained(cb, b, amap, expr, labels, live, static)
    return Operand(expr, labels, live, static, full, weave.datatype)


def _constrained(cb, b, amap, expr, labels, live, static):
    """A composed reindexing's intermediate indices ``row . d + shift`` must stay in
    ``[0, |axis|)`` (``ir.affine`` constraints): positions where one leaves are dead and hold
    0, like reads outside the source (FORMAT.md §7, interpreter/READINGS.md 2)."""
    gen = cb.gen
    used = sorted({i for c in amap.constraints for i, s in enumerate(c.row) if s != 0})
    deg = b.degree
    labels = list(labels)
    for i in used:
        if ("d", i) not in labels:  # the operand does not vary along it: widen it there
            expr = cb.fw.bind("widened", f"{atom(expr)}.unsqueeze(-1).expand("
                              f"*{atom(expr)}.shape, {cb.axis_size(deg[i])})")
            if live is not None:
                live = f"{atom(live)}.unsqueeze(-1)"
            labels.append(("d", i))
            if static is not None:
                static = tuple(a[..., None] for a in static)
    mask_labels = [("d", i) for i in used]
    r = len(used)
    grids = {}
    for q, i in enumerate(used):
        n = cb.axis_size(deg[i])
        view = f".view({', '.join(n if p == q else '1' for p in range(r))})" if r > 1 else ""
        grids[i] = f"torch.arange({n}, device={atom(expr)}.device){view}"
    conds = []
    sizes_ref = [gen.ref_size(deg[i].size) for i in used]
    ok_ref = np.ones(sizes_ref, dtype=bool)
    rows_ref = []
    for c in amap.constraints:
        index = _index_code(cb, [(c.row[i], grids[i]) for i in used], c.shift)
        var = cb.fw.bind(identifier(c.axis.label, "index") + "_index", index,
                         f"intermediate index on {comment_text(c.axis.label, 20)}")
        conds.append(f"({var} >= 0) & ({var} < {cb.axis_size(c.axis)})")
        rows_ref.append(((tuple(gen.ref_size(c.row[i]) for i in used), gen.ref_size(c.shift)),
                         gen.ref_size(c.axis.size)))
    for (row, shift), n in rows_ref:
        (cidx,) = liveness.positions([(row, shift)], sizes_ref)
        ok_ref = ok_ref & (cidx >= 0) & (cidx < n)
    inside = cb.fw.bind("inside", " & ".join(f"({c})" for c in conds),
                        "[" + ", ".join(comment_text(deg[i].label, 20) for i in used)
                        + "] where every intermediate index stays on its axis")
    inside = align_code(inside, mask_labels, labels)
    ok_static = liveness.align(ok_ref, mask_labels, labels)
    pos = sure = ok_static
    if static is not None:
        pos, sure = static[0] & ok_static, static[1] & ok_static
    if liveness.make(pos, sure) is None:
        return expr, labels, live, static
    new_live = cb.fw.bind("inside_live", inside if live is None else f"{atom(live)} & {inside}")
    expr = cb.fw.bind("constrained", f"torch.where({new_live}, {expr}, 0)")
    return expr, labels, new_live, (pos, sure)


def _general_read(cb, b, k, amap, labels, tiled, general, expr, live, static):
    gen = cb.gen
    tmp = [("s", j) for j in general]
    src_pos = [tiled[j] for j in general]
    cur = [("s", general[src_pos.index(p)]) if p in src_pos else labels[p]
           for p in range(len(labels))]
    rest = [lab for p, lab in enumerate(cur) if p not in src_pos]
    moved = align_code(expr, cur, rest + tmp)
    moved_live = align_code(live, cur, rest + tmp) if live is not None else None
    used = sorted({i for j in general for i, s in enumerate(amap.rows[j]) if s != 0})
    deg = b.degree
    new = [("d", i) for i in used]
    extent_ref = [gen.ref_size(amap.cod[j].size) for j in general]
    sizes_ref = [gen.ref_size(deg[i].size) for i in used]
    rows_ref = [(tuple(gen.ref_size(amap.rows[j][i]) for i in used),
                 gen.ref_size(amap.shifts[j])) for j in general]
    name = identifier(getattr(b.operator, "label", "") or "", "read") or "read"
    if isinstance(b.operator, View) and b.operator.label:
        name = identifier(b.operator.label, "read")
    # static liveness of the read (the source's, gathered, and where it stays inside)
    ok_ref = np.ones(sizes_ref, dtype=bool)
    for c, n in zip(liveness.positions(rows_ref, sizes_ref), extent_ref):
        ok_ref = ok_ref & (c >= 0) & (c < n)
    new_static = None
    if static is not None:
        src_p = liveness.align(static[0], cur, rest + tmp)
        src_s = liveness.align(static[1], cur, rest + tmp)
        rp, _ = liveness.read(src_p, extent_ref, rows_ref, sizes_ref)
        rs, _ = liveness.read(src_s, extent_ref, rows_ref, sizes_ref)
        new_static = (rp, rs)
    elif not ok_ref.all():
        shape = [1] * len(rest) + list(sizes_ref)
        new_static = (ok_ref.reshape(shape), ok_ref.reshape(shape))
    radix = _mixed_radix(gen, amap, general, used, deg)
    if radix is not None:
        order = radix
        sizes = f"({', '.join(cb.axis_size(deg[i]) for i in order)}" \
            f"{',' if len(order) == 1 else ''})"
        comment = "[" + ", ".join(comment_text(amap.cod[j].label, 20) for j in general) + \
            "] -> [" + ", ".join(comment_text(deg[i].label, 20) for i in order) + "]"
        var = cb.fw.bind(name, atom(moved) + f".unflatten(-1, {sizes})", comment)
        out_live = None
        if moved_live is not None:
            out_live = cb.fw.bind(var + "_live", f"{atom(moved_live)}.expand({atom(moved)}.shape)"
                                  f".unflatten(-1, {sizes})")
        labels = rest + [("d", i) for i in order]
        if static is not None:
            perm = [used.index(i) for i in order]
            nr = len(rest)
            new_static = tuple(np.transpose(a, list(range(nr)) + [nr + q for q in perm])
                               for a in new_static)
            if liveness.make(*new_static) is None:
                new_static, out_live = None, None
        return var, labels, out_live, new_static
    comment = _read_comment(amap, general, used, deg)
    if len(general) == 1 and radix is None:
        return _read_in_place(cb, b, amap, cur, src_pos[0], general[0], used, deg, expr, live,
                              new_static, ok_ref, name, comment)
    rows_code = "[" + ", ".join(
        "((" + ", ".join(cb.size_code(amap.rows[j][i]) for i in used)
        + ("," if len(used) == 1 else "") + f"), {cb.size_code(amap.shifts[j])})"
        for j in general) + "]"
    sizes_code = "(" + ", ".join(cb.axis_size(deg[i]) for i in used) \
        + ("," if len(used) == 1 else "") + ")"
    cb.gen.prelude.add("views")
    may_leave = not ok_ref.all()
    if may_leave:
        var = cb.fw.names.fresh(name)
        live_var = cb.fw.names.fresh(var + "_live")
        cb.fw.emit(f"{var}, {live_var} = affine_read({moved}, {rows_code}, {sizes_code})",
                   comment + "; reads outside are dead")
        if rest:
            cb.fw.emit(f"{live_var} = {live_var}[{', '.join(['None'] * len(rest))}]")
        out_live = live_var
        if moved_live is not None:
            cb.fw.emit(f"{live_var} = {live_var} & affine_read({atom(moved_live)}.expand("
                       f"{atom(moved)}.shape), {rows_code}, {sizes_code})[0]")
    else:
        var = cb.fw.bind(name, f"affine_read({moved}, {rows_code}, {sizes_code})[0]", comment)
        out_live = None
        if moved_live is not None:
            out_live = cb.fw.bind(var + "_live", f"affine_read({atom(moved_live)}.expand("
                                  f"{atom(moved)}.shape), {rows_code}, {sizes_code})[0]")
    if new_static is not None and liveness.make(*new_static) is None:
        new_static, out_live = None, None
    return var, rest + new, out_live, new_static


def _index_code(cb, terms, shift) -> str:
    """``sum(stride * grid) + shift`` as code, signs folded, zero terms left out."""
    out = ""
    for stride, grid in terms:
        if stride == 0:
            continue
        neg = stride.could_extract_minus_sign()
        mag = -stride if neg else stride
        term = grid if mag == 1 else f"{cb.size_code(mag)} * {grid}"
        out = (f"-{term}" if neg else term) if not out else \
            f"{out} {'-' if neg else '+'} {term}"
    if shift != 0:
        neg = shift.could_extract_minus_sign()
        mag = cb.size_code(-shift if neg else shift)
        out = f"{out} {'-' if neg else '+'} {mag}" if out else cb.size_code(shift)
    return out or "0"


def _read_in_place(cb, b, amap, cur, pos, j, used, deg, expr, live, new_static, ok_ref, name,
                   comment):
    """One source dim read through an affine row: the box of degree dims takes its place."""
    n = len(cur)
    rows_code = "[((" + ", ".join(cb.size_code(amap.rows[j][i]) for i in used) + \
        ("," if len(used) == 1 else "") + f"), {cb.size_code(amap.shifts[j])})]"
    sizes_code = "(" + ", ".join(cb.axis_size(deg[i]) for i in used) + \
        ("," if len(used) == 1 else "") + ")"
    dim = pos - n
    labels = cur[:pos] + [("d", i) for i in used] + cur[pos + 1:]
    trailing = n - pos - 1
    cb.gen.prelude.add("views")
    out_live = None
    if not ok_ref.all():
        var = cb.fw.names.fresh(name)
        live_var = cb.fw.names.fresh(var + "_live")
        cb.fw.emit(f"{var}, {live_var} = affine_read({expr}, {rows_code}, {sizes_code}, "
                   f"dim={dim})", comment + "; reads outside are dead")
        lead = ["None"] * pos
        if pos or trailing:
            idx = ", ".join(lead + [":"] * len(used) + ["None"] * trailing)
            cb.fw.emit(f"{live_var} = {live_var}[{idx}]")
        out_live = live_var
        if live is not None:
            read = cb.fw.bind(var + "_source_live", f"affine_read({atom(live)}.expand("
                              f"{atom(expr)}.shape), {rows_code}, {sizes_code}, dim={dim})[0]")
            cb.fw.emit(f"{live_var} = {live_var} & {read}", "dead where read outside or dead "
                       "in the source")
    else:
        var = cb.fw.bind(name, f"affine_read({expr}, {rows_code}, {sizes_code}, dim={dim})[0]",
                         comment)
        if live is not None:
            out_live = cb.fw.bind(var + "_live", f"affine_read({atom(live)}.expand("
                                  f"{atom(expr)}.shape), {rows_code}, {sizes_code}, "
                                  f"dim={dim})[0]")
    if new_static is not None:
        # the static arrays are laid out rest + new: move the new dims into place
        r = len(used)
        order = list(range(pos)) + list(range(n - 1, n - 1 + r)) + list(range(pos, n - 1))
        new_static = tuple(np.transpose(a, order) for a in new_static)
        if liveness.make(*new_static) is None:
            new_static, out_live = None, None
    return var, labels, out_live, new_static


def _read_comment(amap, general, used, deg) -> str:
    """``[x, w|x] <- [x - w|x]``: the positions read, per source dim."""
    import sympy

    terms = []
    for j in general:
        expr = sum((amap.rows[j][i] * sympy.Symbol(f"_d{i}") for i in used), amap.shifts[j])
        text = sympy.sstr(sympy.expand(expr))
        for i in used:
            text = re.sub(rf"\b_d{i}\b", "i_" + comment_text(deg[i].label, 20), text)
        terms.append(comment_text(text, 48))
    src = ", ".join(comment_text(amap.cod[j].label, 20) for j in general)
    dst = ", ".join(comment_text(deg[i].label, 20) for i in used)
    return f"[{dst}] reads [{src}] at [{', '.join(terms)}]"


def _mixed_radix(gen, amap, general, used, deg):
    """Degree dims in major-to-minor order when the single general row is a mixed-radix
    bijection onto its source dim (an ``unflatten``), else None."""
    if len(general) != 1 or not used:
        return None
    j = general[0]
    row, shift = amap.row(j)
    if shift != 0:
        return None
    for env in (gen.env, gen.ref_env):
        vals = {i: env.size(row[i]) for i in used}
        if any(v <= 0 for v in vals.values()):
            return None
        order = sorted(used, key=lambda i: -vals[i])
        stride = 1
        for i in reversed(order):
            if vals[i] != stride:
                return None
            stride *= env.size(deg[i].size)
        if stride != env.size(amap.cod[j].size):
            return None
    return order


# -- placing results -----------------------------------------------------------------------------
def place(ctx: Ctx, b: Broadcasted, results: list[OpResult], deg_tag: str = "d") -> list[Wire]:
    cb = ctx.cb
    out = []
    if len(results) != len(b.output_weaves):
        raise SpecError(f"{type(b.operator).__name__} produced {len(results)} results for "
                        f"{len(b.output_weaves)} output weaves", b.path)
    for j, (res, weave) in enumerate(zip(results, b.output_weaves)):
        dst = []
        d = 0
        t = 0
        for a in weave.shape:
            if a is TILED:
                dst.append((deg_tag, d))
                d += 1
            else:
                dst.append(("o", j, t))
                t += 1
        array = weave.fill(tuple(b.degree))
        if ctx.pairs is not None:
            dst = [ctx.pl(lab) for lab in dst]
            if ("p",) in dst or ("p",) in res.labels:
                out.append(_place_pairs(ctx, res, dst, array))
                continue
        full = res.full if res.full is not None else ctx.any_full()
        extra = [lab for lab in res.labels if lab not in dst]
        if extra:
            raise AssertionError(f"result labels {extra} not in output weave")
        code = align_code(res.expr, res.labels, dst)
        missing = [lab for lab in dst if lab not in res.labels]
        if missing:
            code = ctx.expand(code, dst, set(res.labels), full)
            if cb.lead() is not None:
                full = True
        static = None
        live = None
        if res.static is not None:
            sp = liveness.align(res.static[0], res.labels, dst)
            ss = liveness.align(res.static[1], res.labels, dst)
            static = liveness.make(sp, ss)
        if static is not None:
            live = align_code(res.live, res.labels, dst)
            if live != res.live:
                live = cb.fw.bind(identifier(res.live) if res.live.isidentifier() else "live",
                                  live)
        if code != res.expr:
            base = res.expr if res.expr.isidentifier() else "result"
            code = cb.fw.bind(base, code, "[" + ", ".join(
                comment_text(a.label, 20) for a in array.shape) + "]")
        out.append(Wire(code, array, live, static, full,
                        slot=res.slot if code == res.expr else None))
    return out


def _place_pairs(ctx: Ctx, res: OpResult, dst: list, array) -> Wire:
    """A result in pairs form: its dims must already be the output's, the pairs dim first."""
    from .pairs import escape

    if res.labels != dst or dst[0] != ("p",) or dst.count(("p",)) != 1 or res.live is not None:
        escape(ctx.pairs_origins, "a result that is not a plain pairs array")
    return Wire(res.expr, array, None, None, True, pairs=ctx.pairs, origins=ctx.pairs_origins)


# -- the driver ----------------------------------------------------------------------------------
def lower_broadcasted(cb, b: Broadcasted, wires: list[Wire], then: Broadcasted | None = None
                      ) -> list[Wire]:
    from .registry import load_rules

    rules = load_rules()
    fn = rules.get(type(b.operator))
    if fn is None:
        raise SpecError(f"no code generation rule for {type(b.operator).__name__}", b.path)
    if len(wires) != len(b.input_weaves):
        raise SpecError(f"{len(b.input_weaves)} input weaves but {len(wires)} inputs", b.path)
    from .pairs import lower_on_pairs, wants_pairs

    if wants_pairs(cb, b, wires):
        start = len(cb.fw.bound)
        outs = lower_on_pairs(cb, b, wires, then, fn)
        fresh = set(cb.fw.bound[start:])
        return [round_output(cb, b, j, w, w.var in fresh) for j, w in enumerate(outs)]
    operands = [read_operand(cb, b, k, w) for k, w in enumerate(wires)]
    start = len(cb.fw.bound)
    if then is None:
        ctx = Ctx(cb, b, operands)
        ctx.wires = list(wires)
        outs = place(ctx, b, fn(ctx))
    else:
        ctx = Ctx(cb, b, operands, relabel=_fusion_relabel(b, then), final=then)
        ctx.wires = list(wires)
        outs = place(ctx, then, fn(ctx), deg_tag="v")
    fresh = set(cb.fw.bound[start:])
    return [round_output(cb, b, j, w, w.var in fresh) for j, w in enumerate(outs)]


def round_output(cb, b: Broadcasted, j: int, w: Wire, fresh: bool) -> Wire:
    dt = output_format(b, j)
    if dt is None:
        return w
    enc = storage_encoding(dt).value
    if kind(dt) == "natural" and enc == "INT64":
        return w
    scale = block_scale(dt)
    if scale is not None and w.pairs is not None and w.rank < 2:
        from .pairs import escape

        escape(w.origins, "block-scaled rounding along the sparse axis")
    cb.gen.prelude.add("quant")
    if scale is not None:
        channels = cb.size_code(scale.channels)
        code = f"mx_block_round({w.var}, {enc!r}, {channels})"
    elif kind(dt) == "complex":
        code = f"round_to({w.var}, {enc!r})"
    else:
        code = f"round_{enc.lower()}({w.var})"
    guard = cb.quant_guard()
    if fresh:
        cb.fw.emit(f"if {guard}:")
        cb.fw.emit(f"    {w.var} = {code}", f"held in {_format_text(dt)}")
        return w
    name = "as_" + ("mxfp8" if scale is not None else enc.lower())
    var = cb.fw.bind(name, f"{code} if {guard} else {w.var}", f"held in {_format_text(dt)}")
    return dataclasses.replace(w, var=var, slot=None)


def _format_text(dt) -> str:
    return comment_text(str(dt), 40)


def _fusion_relabel(b: Broadcasted, view: Broadcasted) -> dict:
    """Labels of ``b``'s output dims -> degree labels of the following view."""
    weave = b.output_weaves[0]
    out_labels = []
    d = t = 0
    for a in weave.shape:
        if a is TILED:
            out_labels.append(("d", d))
            d += 1
        else:
            out_labels.append(("o", 0, t))
            t += 1
    amap = affine_map(view.reindexings[0])
    rel = {}
    for j, lab in enumerate(out_labels):
        i = next(i for i, s in enumerate(amap.rows[j]) if s != 0)
        rel[lab] = ("v", i)
    return rel


def fusible_view(cb, item, nxt, wires: list[Wire] | None = None) -> bool:
    """A contraction whose single result is only re-read by the next item, a pure relabelling
    ``View`` (e.g. ``diag`` after a per-expert ``Linear``): fold both into one einsum so the
    |e|x|e| intermediate never exists."""
    if not (isinstance(item, Broadcasted) and isinstance(nxt, Broadcasted)):
        return False
    if not isinstance(item.operator, (Linear, Einops)) or not isinstance(nxt.operator, View):
        return False
    if isinstance(item.operator, Einops) and not any(item.operator.signature):
        return False
    if len(item.output_weaves) != 1 or len(nxt.input_weaves) != 1:
        return False
    if not item.input_weaves:
        return False
    if any(a is not TILED for a in nxt.input_weaves[0].shape):
        return False
    if wires is not None and any(w.live is not None for w in wires):
        return False
    if kind(item.output_weaves[0].datatype) != "real":
        return False
    amap = affine_map(nxt.reindexings[0], constraints_ok=True)
    if amap.constraints:
        return False
    gen = cb.gen

    def sizes(axis):
        return gen.size(axis.size), gen.ref_size(axis.size)

    if any(simple_source(amap, j, sizes) is None for j in range(len(amap.cod))):
        return False
    # the view must read every dim of the contraction's output (it is all TILED)
    return len(amap.cod) == len(item.output_weaves[0].shape)
