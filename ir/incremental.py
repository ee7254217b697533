"""What each output of a block reads along the token axis, and so the state a decoder keeps.

Decoding one token (or a chunk) at a time runs a block's ordinary computation on the new tokens
only. That is exact when every operator works position by position along the token axis, except
for the reads classified here (every leaf ``Broadcasted`` below the block, through blocks, boxes,
tapes and repetition):

* **look-back** — an input reindexed so that token ``x`` reads token ``x + shift + sum(s_i d_i)``
  over other degree axes ``d_i`` (the window ``w|x``, the n-gram ``L|x``, a shifted view): the
  composed affine map (:func:`ir.affine.affine_map`) has stride 1 on the token axis and reaches
  back ``keep = -(shift + sum(min(0, s_i (|d_i| - 1))))`` positions. The decoder keeps the last
  ``keep`` entries of the value read there and reads ``cat(kept, new)`` instead of ``new``.
* **position** — a rotary table over the token axis (``Rotary``, ``YarnRotary``): positions
  are absolute token indices, so the decoder keeps a counter and offsets them.
* **recurrence** — a ``Scan`` whose recurrence axis is the token axis: token ``x + 1``'s state
  is the step applied to token ``x``'s, so the decoder carries the last state (``keep`` 1) and
  runs the step on the new tokens only; incremental, with that carried state.
* **future** — a look-back whose reach forward ``shift + sum(max(0, s_i (|d_i| - 1)))`` is
  positive: output ``x`` depends on later tokens, the block is not causal
  (:class:`NonCausalError`, naming the read).
* **unbounded** — anything else that mixes positions: an operator acting along the token axis
  (a softmax or contraction over it, a triangular weighting), a read with another stride or a
  range constraint on the token axis, a source other than a rotary table generating values along
  it. The block is not incremental with a bounded state; the report names the read.

Pointwise operators (``Arithmetic``, ``Elementwise``, casts, ``Identity``, complex pairs) may
hold the token axis in their target: they still work position by position.

A token axis is one :func:`ncdc.ir.axes.is_token_axis` recognises. Pure IR and sympy.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from .affine import affine_map
from .axes import is_token_axis
from .errors import NonCausalError, SpecError
from .frozen import quick_init
from .morphisms import Block, Broadcasted, CoupledScan, Morphism, Scan
from .operators import (
    Arithmetic,
    BlockOperator,
    Cast,
    Decomplex,
    Elementwise,
    Identity,
    PairsAsComplex,
    ParaBlockOperator,
    Rotary,
    TypeConvert,
    View,
)
from .walk import walk

ZERO = sympy.Integer(0)

POINTWISE = (Arithmetic, Elementwise, TypeConvert, Cast, Identity, PairsAsComplex, Decomplex)
"""Operators that compute each position of their target from the same position alone."""

KINDS = ("lookback", "position", "recurrence", "unbounded", "future")


@quick_init
@dataclass(frozen=True)
class TokenRead:
    """One read along the token axis: its ``kind`` (:data:`KINDS`), the JSON ``path`` of the
    reindexing or operator, the ``titles`` of the blocks around it, an operator ``label``,
    ``keep`` (earlier entries a look-back needs), ``reach`` (later entries a future read needs),
    ``input`` (the operator's input index; -1 for an operator), ``row`` (the token row of the
    composed index map) and ``count`` (the enclosing blocks' repetitions)."""

    kind: str
    path: str
    titles: tuple[str, ...]
    label: str
    why: str
    keep: sympy.Expr = ZERO
    reach: sympy.Expr = ZERO
    input: int = -1
    row: int = -1
    count: sympy.Expr = sympy.Integer(1)

    def describe(self) -> str:
        where = f" at {self.path}" if self.path else ""
        chain = f" in {' / '.join(self.titles)}" if self.titles else ""
        return f"{self.label}: {self.why}{where}{chain}"


@quick_init
@dataclass(frozen=True)
class Analysis:
    """Every token-axis read of a block, in pre-order."""

    reads: tuple[TokenRead, ...]
    has_tokens: bool

    def of_kind(self, kind: str) -> tuple[TokenRead, ...]:
        return tuple(r for r in self.reads if r.kind == kind)

    @property
    def causal(self) -> bool:
        return not self.of_kind("future")

    @property
    def incremental(self) -> bool:
        """Decodable with a state bounded by the look-backs (causal, nothing unbounded)."""
        return self.causal and not self.of_kind("unbounded")

    @property
    def lookbacks(self) -> tuple[TokenRead, ...]:
        return self.of_kind("lookback")

    @property
    def positions(self) -> bool:
        return bool(self.of_kind("position"))

    @property
    def recurrences(self) -> tuple[TokenRead, ...]:
        """The scans over the token axis (each carries one state)."""
        return self.of_kind("recurrence")

    def raise_if_not_causal(self) -> None:
        future = self.of_kind("future")
        if future:
            r = future[0]
            raise NonCausalError(f"not causal: {r.label} {r.why}", r.path, r.titles)


def _label(b: Broadcasted) -> str:
    op = b.operator
    return type(op).__name__ + (f" {op.label}" if getattr(op, "label", None) else "")


def _sign(e) -> int | None:
    e = sympy.sympify(e)
    if e.is_zero:
        return 0
    if e.is_positive:
        return 1
    if e.is_negative:
        return -1
    return None


def classify_reindexing(b: Broadcasted, k: int) -> tuple[str, int, sympy.Expr, sympy.Expr, str]:
    """``(kind, row, keep, reach, why)`` of input ``k``'s reindexing along the token axis;
    kind ``"none"`` when it reads each token at its own position (or no token axis at all)."""
    try:
        amap = affine_map(b.reindexings[k])
    except SpecError:
        return "none", -1, ZERO, ZERO, ""  # validation reports it
    out = ("none", -1, ZERO, ZERO, "")
    for j, cod in enumerate(amap.cod):
        row, shift = amap.row(j)
        token_dom = [i for i, a in enumerate(amap.dom) if is_token_axis(a) and row[i] != 0]
        if not is_token_axis(cod):
            if token_dom:
                return ("unbounded", j, ZERO, ZERO,
                        f"reads {cod.label} at a position given by the token axis")
            continue
        if len(token_dom) != 1 or row[token_dom[0]] != 1:
            return ("unbounded", j, ZERO, ZERO,
                    f"reads the token axis {cod.label} at other than a fixed offset")
        reach = _reach(amap, row, shift, token_dom[0])
        if isinstance(reach, str):
            return ("unbounded", j, ZERO, ZERO, f"reads {cod.label} {reach}")
        back, fwd = reach
        if fwd != 0:
            return ("future", j, back, fwd,
                    f"reads {cod.label} up to {sympy.sstr(fwd)} positions ahead")
        if any(is_token_axis(c.axis) or any(row_c != 0 and is_token_axis(amap.dom[i])
                                            for i, row_c in enumerate(c.row))
               for c in amap.constraints):
            return ("unbounded", j, ZERO, ZERO,
                    f"reads {cod.label} through a range-constrained composition")
        if back != 0:
            keep = sympy.expand(back)
            out = ("lookback", j, keep, ZERO, f"reads {sympy.sstr(keep)} earlier {cod.label}")
    return out


def _reach(amap, row, shift, token: int) -> tuple[sympy.Expr, sympy.Expr] | str:
    """``(back, fwd)``: how far before and after its own position a reindexing row with token
    entry ``token`` reads, from the shift and the other domain axes' spans; or, when a sign is
    symbolic, why it cannot be bounded."""
    back, fwd = ZERO, ZERO
    sh = _sign(shift)
    if sh is None:
        return "at a symbolic offset"
    if sh < 0:
        back -= shift
    elif sh > 0:
        fwd += shift
    for i, (a, s) in enumerate(zip(amap.dom, row, strict=True)):
        if i == token or s == 0:
            continue
        sg = _sign(s)
        if sg is None:
            return "with a symbolic stride"
        span = sympy.expand(abs(s) * (a.size - 1))
        if sg < 0:
            back += span
        else:
            fwd += span
    return back, fwd


def _leaf_reads(b: Broadcasted, titles, count) -> list[TokenRead]:
    out = []
    label = _label(b)
    for k in range(len(b.reindexings)):
        kind, row, keep, reach, why = classify_reindexing(b, k)
        if kind != "none":
            out.append(TokenRead(kind, f"{b.path}.reindexings[{k}]", titles, label, why, keep,
                                 reach, k, row, count))
    op = b.operator
    if isinstance(op, (BlockOperator, ParaBlockOperator, *POINTWISE)):
        return out
    ins = {a.uid for w in b.input_weaves for a in w.target if is_token_axis(a)}
    outs = {a.uid for w in b.output_weaves for a in w.target if is_token_axis(a)}
    path = f"{b.path}.operator"
    if ins and not isinstance(op, View):
        out.append(TokenRead("unbounded", path, titles, label,
                             "acts along the token axis (reads every position of it)",
                             count=count))
    elif outs - ins:
        if isinstance(op, Rotary):
            out.append(TokenRead("position", path, titles, label,
                                 "positions are absolute token indices", count=count))
        else:
            out.append(TokenRead("unbounded", path, titles, label,
                                 "generates values along the token axis", count=count))
    return out


def analyse(root: Morphism) -> Analysis:
    """Every read along the token axis below ``root`` (see the module docstring)."""
    reads: list[TokenRead] = []
    counts: dict[str, sympy.Expr] = {}
    has = False
    try:
        has = any(is_token_axis(a) for arr in root.dom for a in arr.shape) or any(
            is_token_axis(a) for arr in root.cod for a in arr.shape)
    except SpecError:
        pass
    for site in walk(root):
        node = site.node
        count = _inherited(counts, site.path)
        if isinstance(node, Block):
            count = count * sympy.sympify(node.tag.repetition)
        counts[site.path] = count
        if isinstance(node, Broadcasted):
            reads.extend(_leaf_reads(node, site.titles, count))
        elif isinstance(node, (Scan, CoupledScan)) and is_token_axis(node.axis):
            reads.append(TokenRead("recurrence", node.path, site.titles, "Scan",
                                   "carries its state from one token to the next",
                                   sympy.Integer(1), count=count))
    return Analysis(tuple(reads), has or bool(reads))


def _inherited(counts: dict, path: str) -> sympy.Expr:
    """The repetition count of the nearest enclosing site recorded in ``counts``."""
    p = path
    while p:
        if "." not in p and "[" not in p:
            break
        cut = max(p.rfind("."), p.rfind("["))
        p = p[:cut]
        if p in counts:
            return counts[p]
    return sympy.Integer(1)


__all__ = ["KINDS", "POINTWISE", "Analysis", "NonCausalError", "TokenRead", "analyse",
           "classify_reindexing"]
