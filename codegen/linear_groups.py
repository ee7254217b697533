"""A pass over a method body (:mod:`codegen.statements`): the Linears of a class that read the
same input are one product, the prelude's ``linears(x, self.a, self.b)``, which reads ``x``
once and calls the kernel once (the mHC's three coefficient maps of one normalised input).

The call of the group is placed at the first call. Each call's value takes the name the
statement holding it binds (``y = self.a(x)`` goes, ``y = self.a(x).view(...)`` becomes
``y = y.view(...)``) where that name is free until then, a fresh name otherwise. Only calls
at the body's own depth join a group, and only while nothing between the first and the last
rebinds a name the input reads.
"""
from __future__ import annotations

import ast
import dataclasses

from .statements import ASSIGN, Statement, names_in, splice


def _calls(s: Statement, layers: frozenset) -> list[tuple[ast.Call, str, str]]:
    """``(call, layer, input code)`` for every one-argument call of a layer in ``s``."""
    if s.kind != ASSIGN or s.depth != 0 or s.rounding is not None:
        return []
    try:
        tree = ast.parse(s.expr, mode="eval")
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        f = getattr(node, "func", None)
        if (isinstance(node, ast.Call) and isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name) and f.value.id == "self"
                and f"self.{f.attr}" in layers and len(node.args) == 1 and not node.keywords):
            out.append((node, f"self.{f.attr}", ast.get_source_segment(s.expr, node.args[0])))
    return out


def _group(body: list[Statement], layers: frozenset):
    """The first group of two or more calls of different layers on one input: a list of
    ``(statement index, call node, layer)``, or None."""
    seen: dict[str, list] = {}
    for i, s in enumerate(body):
        for node, layer, x in _calls(s, layers):
            group = seen.setdefault(x, [])
            if any(g[2] == layer for g in group):
                continue
            reads = set(names_in(x))
            if group and any(_touches(t, reads) for t in body[group[0][0]:i]):
                seen[x] = group = []  # the input changed: a new group starts here
            group.append((i, node, layer))
    return next((g for g in seen.values() if len(g) > 1), None)


def _touches(s: Statement, names: set) -> bool:
    """Whether ``s`` may change the value of one of ``names``: it binds one, writes into one
    (a subscripted target) or is a bare expression reading one (an in-place call)."""
    written = set(s.bound) | {n for t in s.targets if not t.isidentifier() for n in names_in(t)}
    return bool(names & written or (s.kind != ASSIGN and names & set(s.reads)))


def merge_linears(body: list[Statement], layers: frozenset) -> list[Statement]:
    """``body`` with every group of Linears reading one input computed by one ``linears``
    call. ``layers``: the code (``self.name``) of the class's Linear submodules."""
    out = list(body)
    taken = {n for s in out for n in (*s.reads, *s.bound)}
    while (group := _group(out, layers)) is not None:
        first = group[0][0]
        names, edits, dropped = [], {}, set()
        for i, node, layer in group:
            s = out[i]
            whole = ast.parse(s.expr, mode="eval").body
            own = s.targets[0] if len(s.targets) == 1 else None
            free = own is not None and own.isidentifier() and own not in names and not any(
                t.occurrences(own) for t in out[first:i])
            if free and ast.dump(whole) == ast.dump(node):
                names.append(own)
                dropped.add(i)
                continue
            name = own if free else _fresh(layer.removeprefix("self.") + "_out", taken)
            names.append(name)
            edits.setdefault(i, []).append((node, name))
        x = ast.get_source_segment(out[first].expr, group[0][1].args[0])
        call = Statement(ASSIGN, f"linears({x}, {', '.join(g[2] for g in group)})",
                         tuple(names), headings=out[first].headings)
        for i, spans in edits.items():
            out[i] = dataclasses.replace(out[i], expr=splice(out[i].expr, spans))
        out[first] = dataclasses.replace(out[first], headings=())
        kept = []
        for i, s in enumerate(out):
            if i == first:
                kept.append(call)
            if i in dropped:
                if s.headings and i + 1 < len(out):
                    out[i + 1] = dataclasses.replace(out[i + 1],
                                                     headings=s.headings + out[i + 1].headings)
                continue
            kept.append(s)
        out = kept
    return out


def _fresh(base: str, taken: set) -> str:
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name
