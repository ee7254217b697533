"""A pass over a method body (:mod:`codegen.statements`): products that read the same input are
one call of a prelude function (``codegen/prelude/linear.py``), which may compute them as one
product:

* the Linears of a class reading one input, ``linears(x, self.a, self.b)`` (the mHC's three
  coefficient maps of one normalised input);
* matrix products with one right operand, ``matmuls(h, a, b)`` for ``torch.matmul(a, h)`` and
  ``torch.matmul(b, h)`` (the mHC's collapse and combine of the same four streams).

The call of a group is placed at the first product. Each product's value takes the name the
statement holding it binds (``y = self.a(x)`` goes, ``y = self.a(x).view(...)`` becomes
``y = y.view(...)``) where that name is free until then, a fresh name otherwise. Only products
at the body's own depth join a group, and only while nothing between the first and the last
rebinds a name that the shared input or a later product's other operand reads.
"""
from __future__ import annotations

import ast
import dataclasses

from .statements import ASSIGN, Statement, names_in, splice


def _products(s: Statement, layers: frozenset) -> list[tuple[ast.Call, tuple, str]]:
    """``(call, (function, shared input code), other operand code)`` for every product in
    ``s`` that may join a group: a one-argument call of a Linear in ``layers`` (its layer the
    other operand), or a two-argument ``torch.matmul`` (its left operand)."""
    if s.kind != ASSIGN or s.depth != 0 or s.rounding is not None:
        return []
    try:
        tree = ast.parse(s.expr, mode="eval")
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        f = getattr(node, "func", None)
        if not (isinstance(node, ast.Call) and isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name) and not node.keywords):
            continue
        code = [ast.get_source_segment(s.expr, a) for a in node.args]
        if f.value.id == "self" and f"self.{f.attr}" in layers and len(code) == 1:
            out.append((node, ("linears", code[0]), f"self.{f.attr}"))
        elif f.value.id == "torch" and f.attr == "matmul" and len(code) == 2:
            out.append((node, ("matmuls", code[1]), code[0]))
    return out


def _touches(s: Statement, names: set) -> bool:
    """Whether ``s`` may change the value of one of ``names``: it binds one, writes into one
    (a subscripted target) or is a bare expression reading one (an in-place call)."""
    written = set(s.bound) | {n for t in s.targets if not t.isidentifier() for n in names_in(t)}
    return bool(names & written or (s.kind != ASSIGN and names & set(s.reads)))


def _group(body: list[Statement], layers: frozenset):
    """The first group of two or more products with one shared input and different other
    operands: ``(function, shared input, [(statement index, call node, other operand)])``, or
    None."""
    seen: dict[tuple, list] = {}
    for i, s in enumerate(body):
        for node, key, other in _products(s, layers):
            group = seen.setdefault(key, [])
            if any(g[2] == other for g in group):
                continue
            reads = set(names_in(key[1])) | set(names_in(other))
            if group and any(_touches(t, reads) for t in body[group[0][0]:i]):
                seen[key] = group = []  # an operand changed: a new group starts here
            group.append((i, node, other))
    return next(((*key, g) for key, g in seen.items() if len(g) > 1), None)


def merge_products(body: list[Statement], layers: frozenset) -> list[Statement]:
    """``body`` with every group of products reading one input computed by one call.
    ``layers``: the code (``self.name``) of the class's plain Linear submodules."""
    out = list(body)
    taken = {n for s in out for n in (*s.reads, *s.bound)}
    while (found := _group(out, layers)) is not None:
        fn, shared, group = found
        first = group[0][0]
        names, edits, dropped = [], {}, set()
        for i, node, other in group:
            s = out[i]
            own = s.targets[0] if len(s.targets) == 1 else None
            free = own is not None and own.isidentifier() and own not in names and not any(
                t.occurrences(own) for t in out[first:i])
            if free and ast.dump(ast.parse(s.expr, mode="eval").body) == ast.dump(node):
                names.append(own)
                dropped.add(i)
                continue
            base = other.removeprefix("self.") if fn == "linears" else "product"
            name = own if free else _fresh(base + "_out" if fn == "linears" else base, taken)
            names.append(name)
            edits.setdefault(i, []).append((node, name))
        call = Statement(ASSIGN, f"{fn}({shared}, {', '.join(g[2] for g in group)})",
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
