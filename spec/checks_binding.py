"""Checks that need bound sizes: stride rows reading past an axis, and unbound symbols.

**Stride rows** (``stride-out-of-range``, warning). A row ``axis <- Σ s_i·dom_i + shift`` of a
``StrideMorphism`` reads (gather) or writes (scatter: ``CovariantView``, ``ConcatenateAxes``)
positions ``lo..hi`` of ``axis`` over the whole domain box. A position outside ``[0, |axis|)``
is legal — it reads the universal unit (docs/format.md §2.4) — and several views of the seed do it by
design (the window ``x <- x - j``, the Engram look-back and prefix). Such reads are always paired
with a sparse axis that declares the dead positions, so the rule is: **warn only when the axis
read is a ``RawAxis`` and no domain axis with a non-zero stride is an ``AffineSparseAxis`` or
``SparseAxis``**; reading a sparse or concatenated axis is never flagged. With the consistent
sizes of docs/format.md §4.5 the seed gives no warning; an inconsistent size choice (e.g.
``|c| < |Ẽ|·|ŷ|``, making ``qgrp`` read past ``c``) does. Rows whose sizes are not all bound are
skipped (the unbound symbols are reported separately).

**Unbound symbols** (``unbound-symbol``). Every symbol of the spec the binding leaves without a
value, named with the places it is used: a warning when ``data`` uses it, info when only the
repository does (the truncated remainder).
"""
from __future__ import annotations

import dataclasses

import sympy

from ncdc.ir.arrays import Array, Weave
from ncdc.ir.axes import AffineSparseAxis, Axis, RawAxis, SparseAxis
from ncdc.ir.datatypes import Complex, Natural, Quantified
from ncdc.ir.errors import BindingError
from ncdc.ir.morphisms import Block, Broadcasted, Drop, Grab, Rearrangement, StrideMorphism
from ncdc.ir.numeric import FreeNumeric, free_symbols
from ncdc.ir.walk import by_kind

from .symbol_names import qualified_names

_SPARSE = (AffineSparseAxis, SparseAxis)


def check_stride_rows(ck, node: StrideMorphism, path: str, titles, writes: bool) -> None:
    env = ck.env
    for r, row in enumerate(node.rows):
        axis = row.axis
        if type(axis) is not RawAxis:
            continue
        used = [(d, s) for d, s in zip(node.dom_, row.strides, strict=True) if s != 0]
        if any(isinstance(d, _SPARSE) for d, _ in used):
            continue
        try:
            n_axis = env.size(axis.size)
            lo = hi = env.size(row.shift)
            empty = False
            for d, s in used:
                n, st = env.size(d.size), env.size(s)
                if n <= 0:
                    empty = True
                    break
                lo += min(0, st * (n - 1))
                hi += max(0, st * (n - 1))
        except BindingError:
            continue
        if empty or (0 <= lo and hi < n_axis):
            continue
        verb = "writes" if writes else "reads"
        dom = ", ".join(d.label for d in node.dom_) or "()"
        ck.warning("stride-out-of-range", f"row {r} {verb} positions {lo}..{hi} of axis "
                   f"{axis.label} (size {n_axis}) over the domain ({dom}) at the bound sizes; "
                   "the positions outside are dead, and no sparse axis declares them",
                   f"{path}._cod_stride_shift[{r}]", titles,
                   (axis.label,) + tuple(d.label for d, _ in used))


# --------------------------------------------------------------------------- symbol uses


class _Uses:
    def __init__(self):
        self.places: dict[FreeNumeric, list[tuple[str, str, tuple]]] = {}
        self.axis_first: dict[int, tuple[Axis, str, tuple]] = {}

    def add(self, expr, what: str, path: str, titles) -> None:
        for s in free_symbols(expr):
            lst = self.places.setdefault(s, [])
            if len(lst) < 50:
                lst.append((what, path, tuple(titles)))

    def axis(self, a: Axis, path: str, titles) -> None:
        if a.uid not in self.axis_first:
            self.axis_first[a.uid] = (a, path, tuple(titles))

    def datatype(self, dt, path, titles) -> None:
        while isinstance(dt, (Quantified, Complex)):
            dt = dt.wraps if isinstance(dt, Quantified) else dt.base
        if isinstance(dt, Natural):
            self.add(dt.max_value, f"the bound of {dt}", path, titles)

    def array(self, arr, path, titles) -> None:
        if isinstance(arr, (Array, Weave)):
            self.datatype(arr.datatype, path, titles)
            for a in arr.shape:
                if isinstance(a, Axis):
                    self.axis(a, path, titles)


def _broadcasted_uses(u: _Uses, node: Broadcasted, path: str, titles) -> None:
    for w in node.input_weaves + node.output_weaves:
        u.array(w, path, titles)
    for a in node.backup_degree or ():
        u.axis(a, path, titles)
    op = node.operator
    if dataclasses.is_dataclass(op):
        for f in dataclasses.fields(op):
            val = getattr(op, f.name, None)
            if isinstance(val, sympy.Basic):
                u.add(val, f"{type(op).__name__}.{f.name}", path + ".operator", titles)


def _rearrangement_uses(u: _Uses, node: Rearrangement, path: str, titles) -> None:
    for obj in node.dom_:
        if isinstance(obj, Axis):
            u.axis(obj, path, titles)
        else:
            u.array(obj, path, titles)


def _stride_uses(u: _Uses, node: StrideMorphism, path: str, titles) -> None:
    for a in node.dom_:
        u.axis(a, path, titles)
    for r, row in enumerate(node.rows):
        u.axis(row.axis, path, titles)
        for x in row.strides + (row.shift,):
            u.add(x, f"stride row {r}", path, titles)


def _block_uses(u: _Uses, node: Block, path: str, titles) -> None:
    u.add(node.tag.repetition, f"the repetition of {node.title!r}", path, titles)


def _tape_uses(u: _Uses, node, path: str, titles) -> None:
    u.array(node.size, path, titles)


_USES = {Broadcasted: _broadcasted_uses, Rearrangement: _rearrangement_uses,
         StrideMorphism: _stride_uses, Block: _block_uses, Grab: _tape_uses, Drop: _tape_uses}
"""What each kind of site contributes to the symbol uses (by class, :func:`ir.walk.by_kind`)."""


def symbol_uses(sites) -> dict[FreeNumeric, list[tuple[str, str, tuple]]]:
    """For every symbol ``data`` depends on: ``(what, json_path, titles)`` of its uses (at most
    50 each). Axis sizes are attributed to the first place the axis is used."""
    u = _Uses()
    for s in sites:
        record = by_kind(_USES, s.node)
        if record is not None:
            record(u, s.node, s.path, s.titles)
    pending = list(u.axis_first.values())
    seen = set(u.axis_first)
    while pending:
        a, path, titles = pending.pop(0)
        u.add(a.size, f"the size of axis {a.label}", path, titles)
        extra = list(getattr(a, "guides", ())) + list(getattr(a, "parts", ()))
        for x in (getattr(a, "stride", None), getattr(a, "shift", None),
                  getattr(a, "extent", None), getattr(a, "activity", None)):
            if isinstance(x, sympy.Basic):
                u.add(x, f"the liveness form of axis {a.label}", path, titles)
        for g in extra:
            if g.uid not in seen:
                seen.add(g.uid)
                pending.append((g, path, titles))
    return u.places


def size_key(sym: FreeNumeric, symbols, names: dict | None = None) -> str:
    """How a user names ``sym`` on the command line: its label when no other symbol shares
    it, else its ``code_form``, else its qualified name (``names``, see
    :mod:`spec.symbol_names`), else ``id:<uid>``."""
    if sum(1 for s in set(symbols) if s.label == sym.label) <= 1:
        return sym.label
    return sym.code_form or (names or {}).get(sym) or f"id:{sym.uid}"


def check_unbound(ck, sites, unbound) -> None:
    if not unbound:
        return
    sites = list(sites)
    uses = symbol_uses(sites)
    known = list(unbound) + list(ck.env.values) if ck.env is not None else list(unbound)
    names = qualified_names(known, uses, {s.path: s.node for s in sites})
    for sym in sorted(unbound, key=lambda s: (s.label, s.uid)):
        places = uses.get(sym, [])
        name = f"{sym.label} (id {sym.uid}" + (f", code_form {sym.code_form}" if sym.code_form
                                               else "") + ")"
        hint = f"give --size {size_key(sym, known, names)}=N"
        if not places:
            ck.info("unbound-symbol", f"symbol {name} has no value; only the repository uses "
                    f"it (e.g. the truncated part of the spec); {hint}", sym.path, (),
                    (sym.label,))
            continue
        whats = []
        for what, _, _ in places:
            if what not in whats:
                whats.append(what)
        listing = "; ".join(whats[:5]) + (f"; and {len(whats) - 5} more" if len(whats) > 5
                                          else "")
        _, path, titles = places[0]
        ck.warning("unbound-symbol", f"symbol {name} has no value; used by {listing}; {hint}",
                   path, titles, (sym.label,))


__all__ = ["check_stride_rows", "check_unbound", "size_key", "symbol_uses"]
