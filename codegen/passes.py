"""Passes over a method body's statements (:mod:`codegen.statements`) that leave one statement per
operation: dead assignments go, a rounding joins the statement binding its value, a re-zeroing
``where`` absorbs the value it masks, an alias disappears and the last value is returned
directly. Each folds only where the value is read nowhere else and the statements are at the
same depth (never into a conditional or a loop).

A statement's headings are comment lines above it: when a statement is removed they stay where
they were, above the statement that follows.
"""
from __future__ import annotations

import ast
import dataclasses
from collections import Counter

from .linear_groups import merge_linears
from .statements import ASSIGN, RETURN, Rounding, Statement, splice, where_reads

LIMIT = 100
"""Longest line a fold may make (a longer one stays two statements)."""


def occurrences(body: list[Statement], name: str) -> int:
    """How often ``name`` is bound or read in ``body``."""
    return sum(s.occurrences(name) for s in body)


def _remove(body: list[Statement], i: int, keep_headings: int | None = None) -> list[Statement]:
    """``body`` without statement ``i``; its headings (the first ``keep_headings`` of them)
    go to the statement after."""
    gone = body[i]
    rest = gone.headings if keep_headings is None else gone.headings[:keep_headings]
    out = body[:i] + body[i + 1:]
    if rest and i < len(out):
        out[i] = dataclasses.replace(out[i], headings=rest + out[i].headings)
    return out


def _rename_from(body: list[Statement], start: int, old: str, new: str) -> None:
    body[start:] = [s.renamed(old, new) for s in body[start:]]


def fold_rounding(body: list[Statement], name: str, rounding: Rounding) -> bool:
    """Fold ``name = self.held(name, ...)`` into the statement binding ``name`` among the last
    three, when the statements since do not read it, are not nested and carry no heading."""
    for at in range(len(body) - 1, max(-1, len(body) - 4), -1):
        s = body[at]
        if s.depth == 0 and s.kind == ASSIGN and s.targets == (name,):
            body[at] = s.rounded(rounding)
            return True
        if s.occurrences(name) or s.depth != 0 or s.headings:
            return False
    return False


def drop_unused(body: list[Statement]) -> list[Statement]:
    """Remove assignments whose names are never read (masks nobody consumed, a tape read whose
    value stays on the tape, a batch shape no expand needed). Only straight-line statements at
    the body's own depth are touched; a tuple target keeps its position with ``_``."""
    out = list(body)
    changed = True
    while changed:
        changed = False
        counts = Counter(n for s in out for n in s.reads + s.bound)
        for idx, s in enumerate(out):
            if s.kind != ASSIGN or s.depth != 0 or len(s.bound) != len(s.targets):
                continue
            if idx + 1 < len(out) and out[idx + 1].depth > s.depth:
                continue  # a header's body follows (never for plain assignments)
            used = [n == "_" or counts[n] > 1 for n in s.targets]
            if all(used):
                continue
            if not any(used):
                out = _remove(out, idx)
            else:
                out[idx] = dataclasses.replace(
                    s, targets=tuple(n if u else "_" for n, u in zip(s.targets, used, strict=False)))
            changed = True
            break
    return out


def _binds(body: list[Statement], name: str) -> int:
    return sum(s.binds_only(name) for s in body)


def fold_masks(body: list[Statement], indent: int) -> list[Statement]:
    """Inline a value read only by the next statement's re-zeroing ``torch.where(live, v, 0)``
    into it, which takes the value's name; and drop an alias ``a = b`` of a name bound once
    (later reads of ``a`` read ``b``). ``indent``: the body's indent (a fold keeps lines within
    :data:`LIMIT`)."""
    out = list(body)
    i = 0
    while i < len(out):
        s = out[i]
        if s.kind != ASSIGN or s.depth != 0 or len(s.targets) != 1 \
                or not s.targets[0].isidentifier():
            i += 1
            continue
        name, expr = s.targets[0], s.value
        if expr.isidentifier() and _binds(out, name) == 1 and not any(
                t.binds_only(expr) for t in out[i + 1:]):
            had_headings = bool(s.headings)
            out = _remove(out, i)  # an alias
            _rename_from(out, i, name, expr)
            if not had_headings:
                i = max(0, i - 1)
            continue
        if i + 1 < len(out) and occurrences(out, name) == 2 and _inline(out, i, indent):
            continue
        i += 1
    return out


def _inline(out: list[Statement], i: int, indent: int) -> bool:
    """Statement ``i``'s value into the re-zeroing ``where`` of statement ``i + 1``."""
    s, nxt = out[i], out[i + 1]
    name = s.targets[0]
    if nxt.kind != ASSIGN or nxt.depth != s.depth or len(nxt.targets) != 1 \
            or not nxt.targets[0].isidentifier():
        return False
    hits = where_reads(nxt.expr, name)
    if len(hits) != 1:
        return False
    mask = hits[0].args[0].id
    inlined = f"torch.where({mask}, {s.value}, 0)"
    merged = dataclasses.replace(nxt, targets=(name,), expr=splice(nxt.expr, [(hits[0], inlined)]),
                                 headings=s.headings + nxt.headings)
    if indent + len(merged.code()) > LIMIT:
        return False
    other = nxt.targets[0]
    out[i:i + 2] = [merged]
    _rename_from(out, i, other, name)
    return True


def fold_casts(body: list[Statement]) -> list[Statement]:
    """A cast ``y = self.held(v, ...)`` of a value ``v`` read nowhere else, bound by an unrounded
    statement just before, is folded into that statement, which keeps its name
    (``v = self.held(<expr>, ...)``); later reads of ``y`` read ``v``."""
    out = list(body)
    i = 0
    while i < len(out):
        c = out[i]
        i += 1
        if not (c.kind == ASSIGN and c.rounding is not None and len(c.targets) == 1
                and c.targets[0].isidentifier() and c.expr.isidentifier()):
            continue
        v = c.expr
        if occurrences(out, v) != 2:
            continue
        at = _cast_source(out, i - 1, v)
        if at is None:
            continue
        p = out[at]
        out[at] = dataclasses.replace(p, rounding=c.rounding)
        out = _remove(out, i - 1, keep_headings=max(0, len(c.headings) - 1))
        i -= 1
        _rename_from(out, i, c.targets[0], v)
    return out


def _cast_source(out: list[Statement], ci: int, v: str) -> int | None:
    """The unrounded statement binding ``v`` among the three lines above statement ``ci``
    (headings count as lines), with nothing reading ``v`` in between."""
    c = out[ci]
    lines = [None] * len(c.headings)  # the cast's own headings, then each statement above
    for k in range(ci - 1, -1, -1):
        lines.append(k)
        lines.extend([None] * len(out[k].headings))
        if len(lines) >= 3:
            break
    for k in lines[:3]:
        if k is None:
            continue
        p = out[k]
        if p.kind == ASSIGN and p.targets == (v,) and p.depth == c.depth:
            if p.rounding is not None or p.expr.startswith("self.held("):
                return None
            return k
        if p.occurrences(v) or p.depth != c.depth:
            return None
    return None


def return_directly(body: list[Statement]) -> list[Statement]:
    """``y = expr`` followed by ``return y`` (``y`` read nowhere else) becomes ``return expr``;
    so does ``a, b = self.block(...)`` followed by ``return a, b`` (a generated block returns
    its several outputs as that tuple)."""
    if len(body) < 2:
        return body
    ret, prev = body[-1], body[-2]
    names = tuple(n.strip() for n in ret.expr.split(",")) if ret.kind == RETURN else ()
    if not all(n.isidentifier() for n in names) or ret.headings or prev.kind != ASSIGN \
            or prev.targets != names or prev.depth != ret.depth:
        return body
    if len(names) > 1 and (prev.rounding is not None or not _calls_self(prev.expr)):
        return body
    if any(occurrences(body, n) != 2 for n in names):
        return body
    return body[:-2] + [Statement(RETURN, prev.expr, rounding=prev.rounding,
                                  headings=prev.headings, depth=ret.depth)]


def _calls_self(code: str) -> bool:
    """``code`` is one call ``self.<name>(...)``."""
    try:
        node = ast.parse(code, mode="eval").body
    except SyntaxError:
        return False
    f = node.func if isinstance(node, ast.Call) else None
    return (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
            and f.value.id == "self")


def _unsuffixed(name: str) -> str | None:
    """``x`` for a namer's ``x_2``, ``x_3``..., else None."""
    base, sep, k = name.rpartition("_")
    if sep and base and k.isdigit() and not k.startswith("0") and int(k) >= 2:
        return base
    return None


def reuse_names(body: list[Statement]) -> list[Statement]:
    """A value named ``x_2`` (``x`` already taken) takes the name ``x`` when ``x`` is bound
    earlier at the body's own depth and read nowhere after the new binding (the new value
    replaces a dead one: ``normed = torch.where(live, normed, 0)``)."""
    out = list(body)
    for i, s in enumerate(out):
        if s.kind != ASSIGN or s.depth != 0 or len(s.targets) != 1:
            continue
        name, base = s.targets[0], _unsuffixed(s.targets[0])
        if base is None:
            continue
        if _binds(out, name) != 1 or not any(t.depth == 0 and t.binds_only(base)
                                              for t in out[:i]):
            continue
        if occurrences(out[i + 1:], base):
            continue
        _rename_from(out, i, name, base)
    return out


def simplify(body: list[Statement], indent: int, linears: frozenset = frozenset()
             ) -> list[Statement]:
    """Every pass, in order; ``linears``: the code of the class's Linear submodules
    (:func:`codegen.linear_groups.merge_linears`)."""
    body = merge_linears(body, linears) if linears else body
    return reuse_names(return_directly(fold_casts(fold_masks(drop_unused(body), indent))))
