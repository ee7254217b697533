"""Reading a ``Broadcasted``'s inputs through their reindexings (docs/format.md §9).

A reindexing that is a plain relabelling (the common case) costs no code at all: the input's
dims just get degree labels. Windows, groups and shifted reads become ``unflatten`` or a strided
view of the padded source (``affine_read``), with a liveness mask only where a read can fall
outside the source; a composed reindexing's intermediate indices are range-checked.
"""
from __future__ import annotations

import numpy as np
import sympy
from sympy.printing.str import StrPrinter

from ncdc.ir.arrays import TILED
from ncdc.ir.errors import SpecError
from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.operators import View

from . import decoder, liveness
from .affine import affine_map, simple_source
from .emit import align_code, atom
from .flips import plain
from .names import comment_text, identifier
from .operands import Operand
from .wires import Wire, zeroed


def read_operand(cb, b: Broadcasted, k: int, wire: Wire, flips: bool = False) -> Operand:
    """Input ``k`` of ``b`` read through its reindexing. With ``flips``, a window read
    backwards stays a view with its dim flipped, and the wire's flipped dims stay flipped
    where they are relabelled (``codegen/flips.py``); otherwise every dim comes in order."""
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
    flips = flips and not amap.constraints
    if wire.flipped and (not flips or any(tiled[j] in wire.flipped for j in general)
                         or len(set(labels)) != len(labels)):
        wire = plain(cb.fw, wire)
    if general or amap.constraints:  # reads outside the source give 0
        wire = zeroed(cb.fw, wire)
    flipped = frozenset(labels[p] for p in wire.flipped)
    expr, live, full = wire.var, wire.live, wire.full
    static = None
    if wire.static is not None:
        static = (wire.static.possible, wire.static.sure)
    if general:
        expr, labels, live, static, more = _general_read(cb, b, k, amap, labels, tiled,
                                                         general, expr, live, static, flips)
        flipped |= more
    if amap.constraints:
        expr, labels, live, static = _constrained(cb, b, amap, expr, labels, live, static)
    return Operand(expr, labels, live, static, full, weave.datatype, flipped, dead=wire.dead)


def _constrained(cb, b, amap, expr, labels, live, static):
    """A composed reindexing's intermediate indices ``row . d + shift`` must stay in
    ``[0, |axis|)`` (``ir.affine`` constraints): positions where one leaves are dead and hold
    0, like reads outside the source (docs/format.md §7, interpreter/READINGS.md 2)."""
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
        index = _index_code(cb.size_code, [(c.row[i], grids[i]) for i in used], c.shift)
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


def _general_read(cb, b, k, amap, labels, tiled, general, expr, live, static, flips):
    """(expr, labels, live, static, flipped labels) of a read through general affine rows."""
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
    for c, n in zip(liveness.positions(rows_ref, sizes_ref), extent_ref, strict=True):
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
        return var, labels, out_live, new_static, frozenset()
    comment = _read_comment(amap, general, used, deg)
    if len(general) == 1 and radix is None:
        return _read_in_place(cb, b, amap, cur, src_pos[0], general[0], used, deg, expr, live,
                              new_static, ok_ref, name, comment, decoder.read_call(
                                  cb.gen, cb.size_code, cb.members.token_sites, b, k, general,
                                  name), flips)
    rows_code = "[" + ", ".join(
        "((" + ", ".join(cb.size_code(amap.rows[j][i]) for i in used)
        + ("," if len(used) == 1 else "") + f"), {cb.size_code(amap.shifts[j])})"
        for j in general) + "]"
    sizes_code = "(" + ", ".join(cb.axis_size(deg[i]) for i in used) \
        + ("," if len(used) == 1 else "") + ")"
    cb.gen.prelude.add("views")
    may_leave = not ok_ref.all()
    site = cb.fw.names.fresh(name) if may_leave else None
    read = decoder.read_call(cb.gen, cb.size_code, cb.members.token_sites, b, k,
                             general, site or name)
    if may_leave:
        var = site
        live_var = cb.fw.names.fresh(var + "_live")
        cb.fw.assign((var, live_var), f"{read(var)}{moved}, {rows_code}, {sizes_code})",
                     comment + "; reads outside are dead")
        if rest:
            cb.fw.assign(live_var, f"{live_var}[{', '.join(['None'] * len(rest))}]")
        out_live = live_var
        if moved_live is not None:
            cb.fw.assign(live_var, f"{live_var} & {read(live_var)}{atom(moved_live)}.expand("
                         f"{atom(moved)}.shape), {rows_code}, {sizes_code})[0]")
    else:
        var = cb.fw.bind(name, f"{read(name)}{moved}, {rows_code}, {sizes_code})[0]", comment)
        out_live = None
        if moved_live is not None:
            out_live = cb.fw.bind(var + "_live", f"{read(var + '_live')}{atom(moved_live)}"
                                  f".expand({atom(moved)}.shape), {rows_code}, {sizes_code})[0]")
    if new_static is not None and liveness.make(*new_static) is None:
        new_static, out_live = None, None
    return var, rest + new, out_live, new_static, frozenset()


def _index_code(size_code, terms, shift) -> str:
    """``sum(stride * grid) + shift`` as code, signs folded, zero terms left out."""
    out = ""
    for stride, grid in terms:
        if stride == 0:
            continue
        neg = stride.could_extract_minus_sign()
        mag = -stride if neg else stride
        term = grid if mag == 1 else f"{size_code(mag)} * {grid}"
        out = (f"-{term}" if neg else term) if not out else \
            f"{out} {'-' if neg else '+'} {term}"
    if shift != 0:
        neg = shift.could_extract_minus_sign()
        mag = size_code(-shift if neg else shift)
        out = f"{out} {'-' if neg else '+'} {mag}" if out else size_code(shift)
    return out or "0"


def _read_in_place(cb, b, amap, cur, pos, j, used, deg, expr, live, new_static, ok_ref, name,
                   comment, read, flips):
    """One source dim read through an affine row: the box of degree dims takes its place.
    With ``flips``, box dims read backwards (of sizes the data does not fix) come flipped."""
    n = len(cur)
    rows_code = "[((" + ", ".join(cb.size_code(amap.rows[j][i]) for i in used) + \
        ("," if len(used) == 1 else "") + f"), {cb.size_code(amap.shifts[j])})]"
    sizes_code = "(" + ", ".join(cb.axis_size(deg[i]) for i in used) + \
        ("," if len(used) == 1 else "") + ")"
    gen = cb.gen
    backwards = [i for i in used if flips and gen.size(amap.rows[j][i]) < 0
                 and gen.ref_size(amap.rows[j][i]) < 0
                 and gen.size(deg[i].size) == gen.ref_size(deg[i].size)]
    if backwards:
        comment += "; " + ", ".join(comment_text(deg[i].label, 20) for i in backwards) + \
            " in reverse order (a view)"
    dim = pos - n
    dim_code = f"dim={dim}" + (", flip=False" if backwards else "")
    labels = cur[:pos] + [("d", i) for i in used] + cur[pos + 1:]
    trailing = n - pos - 1
    cb.gen.prelude.add("views")
    out_live = None
    if not ok_ref.all():
        var = cb.fw.names.fresh(name)
        live_var = cb.fw.names.fresh(var + "_live")
        cb.fw.assign((var, live_var), f"{read(var)}{expr}, {rows_code}, {sizes_code}, "
                     f"{dim_code})", comment + "; reads outside are dead")
        lead = ["None"] * pos
        if pos or trailing:
            idx = ", ".join(lead + [":"] * len(used) + ["None"] * trailing)
            cb.fw.assign(live_var, f"{live_var}[{idx}]")
        out_live = live_var
        if live is not None:
            src_live = cb.fw.bind(var + "_source_live", f"{read(var + '_source_live')}"
                                  f"{atom(live)}.expand({atom(expr)}.shape), {rows_code}, "
                                  f"{sizes_code}, {dim_code})[0]")
            cb.fw.assign(live_var, f"{live_var} & {src_live}", "dead where read outside or "
                         "dead in the source")
    else:
        var = cb.fw.bind(name, f"{read(name)}{expr}, {rows_code}, {sizes_code}, {dim_code})[0]",
                         comment)
        if live is not None:
            out_live = cb.fw.bind(var + "_live", f"{read(var + '_live')}{atom(live)}.expand("
                                  f"{atom(expr)}.shape), {rows_code}, {sizes_code}, "
                                  f"{dim_code})[0]")
    if new_static is not None:
        # the static arrays are laid out rest + new: move the new dims into place
        r = len(used)
        order = list(range(pos)) + list(range(n - 1, n - 1 + r)) + list(range(pos, n - 1))
        new_static = tuple(np.transpose(a, order) for a in new_static)
        if backwards:
            axes = tuple(pos + used.index(i) for i in backwards)
            new_static = tuple(np.ascontiguousarray(np.flip(a, axis=axes)) for a in new_static)
        if liveness.make(*new_static) is None:
            new_static, out_live = None, None
    return var, labels, out_live, new_static, frozenset(("d", i) for i in backwards)


def _read_comment(amap, general, used, deg) -> str:
    """``[x, w|x] <- [x - w|x]``: the positions read, per source dim."""
    names = {f"_d{i}": "i_" + comment_text(deg[i].label, 20) for i in used}
    terms = []
    for j in general:
        expr = sum((amap.rows[j][i] * sympy.Symbol(f"_d{i}") for i in used), amap.shifts[j])
        terms.append(comment_text(_IndexPrinter(names).doprint(sympy.expand(expr)), 48))
    src = ", ".join(comment_text(amap.cod[j].label, 20) for j in general)
    dst = ", ".join(comment_text(deg[i].label, 20) for i in used)
    return f"[{dst}] reads [{src}] at [{', '.join(terms)}]"


class _IndexPrinter(StrPrinter):
    """``sympy.sstr`` with the degree dims' placeholder symbols printed by name (the terms keep
    the placeholders' order)."""

    def __init__(self, names: dict):
        super().__init__()
        self.names = names

    def _print_Symbol(self, expr):
        return self.names.get(expr.name) or super()._print_Symbol(expr)


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
