"""Linears that read one input, computed as one product (a pass over a method body's statements).

The mHC's Mixing Coefficients are three ``Linear`` layers of the same normalised streams, each
with a few outputs (4, 4 and 16): three small products, each costing its call more than its
arithmetic, where one product of the stacked weights costs about what one did (HF's
``DeepseekV4HyperConnection`` holds one fused weight). The pass keeps the three modules, their
parameters and their state-dict keys, and writes

    h_0_out, h_1_out, h_2_out = linears(normed.flatten(-2), self.h_0, self.h_1, self.h_2)

``linears`` (prelude ``linear``) multiplies by the stacked weights only where every layer is a
plain ``Linear`` without hooks; otherwise (an adapter, a hook, a sharded or stored weight) it
calls each layer, so whatever attaches to a module still sees its call.

A group is the calls ``self.<layer>(<arg>)`` of distinct plain Linears with the same argument
text, one per top-level assignment of one name: the first assignment becomes the call of
``linears`` binding every name of the group; an assignment that was the call alone goes, one
that did more with it reads its name instead (``h_2_out = h_2_out.unflatten(...)``). It is
skipped where a statement between would see a difference: one that binds a name the argument
reads, or reads or binds a name the group binds early.
"""
from __future__ import annotations

import ast
import dataclasses

from .passes import _remove
from .statements import ASSIGN, Statement


def _calls(s: Statement, layers: set[str]):
    """``(layer code, argument text, (start, end) of the call)`` of each call of a plain
    Linear in statement ``s`` (a one-line expression)."""
    if s.kind != ASSIGN or s.depth or s.rounding is not None or "\n" in s.expr \
            or len(s.targets) != 1 or not s.targets[0].isidentifier():
        return []
    out, code = [], s.expr.encode("utf-8")  # (ast's offsets count UTF-8 bytes)
    for node in ast.walk(ast.parse(s.expr, mode="eval")):
        if (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"
                and f"self.{node.func.attr}" in layers):
            arg = node.args[0]
            out.append((f"self.{node.func.attr}",
                        code[arg.col_offset:arg.end_col_offset].decode("utf-8"),
                        (node.col_offset, node.end_col_offset)))
    return out


def _group(body: list[Statement], layers: set[str]):
    """The first group of at least two calls (statement indices, layers, the argument), or
    None."""
    seen: dict[str, list[tuple[int, str, tuple[int, int]]]] = {}
    for i, s in enumerate(body):
        calls = _calls(s, layers)
        if len(calls) != 1:
            continue
        layer, arg, span = calls[0]
        members = seen.setdefault(arg, [])
        if all(layer != m[1] and i != m[0] for m in members):
            members.append((i, layer, span))
    for arg, members in seen.items():
        if len(members) < 2:
            continue
        first = members[0][0]
        reads = set(ast.walk(ast.parse(arg, mode="eval")))
        names = {n.id for n in reads if isinstance(n, ast.Name)}
        keep = [members[0]]
        for i, layer, span in members[1:]:
            target = body[i].targets[0]
            between = body[first + 1:i]
            if any(set(s.bound) & names for s in between) or any(
                    target in s.reads or target in s.bound for s in between):
                continue
            keep.append((i, layer, span))
        if len(keep) >= 2:
            return keep, arg
    return None


NARROW = 64
"""The most outputs a layer may have to join a group. A product of a few outputs costs its call,
not its arithmetic, so one product of the stacked weights costs about what one of them did;
the stacking copies the weights on every call, which for wider layers is as much memory
traffic as their products (a decode step's ``w_qa`` and ``w_kv``)."""


def fuse_linears(body: list[Statement], layers: dict[str, int]) -> list[Statement]:
    """``body`` with each group of sibling calls of narrow Linears (``layers``: code ->
    outputs, at most :data:`NARROW`) made one ``linears`` call."""
    layers = {code for code, outputs in layers.items() if outputs <= NARROW}
    if len(layers) < 2:
        return body
    body = list(body)
    while True:
        found = _group(body, layers)
        if found is None:
            return body
        members, arg = found
        targets = tuple(body[i].targets[0] for i, _, _ in members)
        call = f"linears({arg}, {', '.join(layer for _, layer, _ in members)})"
        for i, _, (start, end) in members:  # each call read as its name
            s, code = body[i], body[i].expr.encode("utf-8")
            expr = (code[:start] + s.targets[0].encode("utf-8") + code[end:]).decode("utf-8")
            body[i] = dataclasses.replace(s, expr=expr)
        first = members[0][0]
        body.insert(first, Statement(ASSIGN, call, targets, headings=body[first].headings))
        body[first + 1] = dataclasses.replace(body[first + 1], headings=())
        for i, _, _ in reversed(members):  # an assignment of its own name alone goes
            s = body[i + 1]
            if s.expr == s.targets[0]:
                body = _remove(body, i + 1)
