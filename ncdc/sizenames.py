"""Readable names of size and constant symbols, also when two symbols share a label.

A symbol whose label no other symbol of the spec carries is named by its label (``m``). When
several share a label (pyncd's ``transformer.json`` has two ``k`` and two ``v``), each is named
``label@where``, ``where`` being the first of these that tells it apart from its namesakes: the
innermost block title at its first use in the data, the operator at that use, then the outer
block titles (``k@L_{q}`` and ``k@L_{v}``, ``v@Embedding`` and ``v@Aggregator``), trying its later uses
when the first tells nothing apart. A symbol only the repository uses is ``label@repository``;
one still not told apart falls back to ``id:<uid>``.

The qualified names are accepted wherever a size is named (``--size k@L_{v}=16``,
``Spec.bind(sizes={"k@L_v": 16})``; braces and spaces are optional, as for labels) and used
when printing expressions: ``12*h*k@L_{q}*m + 12*h*k@L_{v}*m`` rather than two ``12*h*k*m``.
"""
from __future__ import annotations

from collections import defaultdict

import sympy

from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.numeric import FreeNumeric
from ncdc.ir.shapes import size_text


def _where(sym: FreeNumeric, uses, nodes) -> list[str]:
    """Qualifier candidates of ``sym``, most specific first: for each of its uses in the data
    (first use first), the innermost block title, the operator, the outer titles. A symbol
    only the repository uses (the truncated remainder of a spec) gets ``repository``."""
    places = uses.get(sym)
    if not places:
        return ["repository"]
    out: list[str] = []
    for _what, path, titles in places:
        node = nodes.get(path.removesuffix(".operator"))
        here = list(titles[-1:])
        if isinstance(node, Broadcasted):
            name = getattr(node.operator, "name", None)
            if name is not None and name.text:
                here.append(name.text)
        here += list(reversed(titles[:-1]))
        out += [c for c in here if c not in out]
    return out


def qualified_names(doc) -> dict[FreeNumeric, str]:
    """Every symbol of a loaded document (``Spec.doc``) -> its readable name."""
    syms = sorted(set(doc.symbols.values()), key=lambda s: s.uid)
    groups: dict[str, list[FreeNumeric]] = defaultdict(list)
    for s in syms:
        groups[s.label].append(s)
    names = {s: s.label for s in syms}
    shared = [g for g in groups.values() if len(g) > 1]
    if not shared:
        return names
    from ncdc.spec.checks_binding import symbol_uses
    from ncdc.spec.checks_sites import all_sites

    sites = list(all_sites(doc.data))
    uses = symbol_uses(sites)
    nodes = {s.path: s.node for s in sites}
    for group in shared:
        cands = {s: _where(s, uses, nodes) for s in group}
        for s in group:
            others = {c for o in group if o is not s for c in cands[o]}
            pick = next((c for c in cands[s] if c not in others), None)
            names[s] = f"{s.label}@{pick}" if pick is not None else f"id:{s.uid}"
        if len({names[s] for s in group}) < len(group):  # two picks collided
            for s in group:
                names[s] = f"id:{s.uid}"
    return names


def _key(text: str) -> str:
    return text.replace(" ", "").replace("{", "").replace("}", "").replace("\\text", "")


def resolve(keys, names: dict[FreeNumeric, str]) -> dict:
    """``keys`` (name -> value) with qualified names replaced by ``id:<uid>``, which
    ``spec.bindings.bind`` understands; other keys pass unchanged."""
    by_name = {_key(n): s for s, n in names.items() if "@" in n}
    out = {}
    for k, v in (keys or {}).items():
        sym = by_name.get(_key(k)) if "@" in k else None
        out[f"id:{sym.uid}" if sym is not None else k] = v
    return out


def check_keys(symbols, names: dict[FreeNumeric, str], keys, origin: str) -> None:
    """A :class:`BindingError` for the first key of ``keys`` that names no symbol, listing
    the names known (qualified where labels are shared) and the close matches."""
    import difflib

    from ncdc.ir.errors import BindingError
    from ncdc.spec.bindings import match

    syms = list(symbols)
    for key in keys or {}:
        if match(syms, key):
            continue
        known = sorted({names.get(s, s.label) for s in syms})
        near = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise BindingError(f"{origin} {key}: no symbol of this spec is named {key!r}{hint} "
                           f"(known: {', '.join(known[:60])}"
                           + (", ...)" if len(known) > 60 else ")"))


def expr_text(expr, env=None, names: dict[FreeNumeric, str] | None = None) -> str:
    """An integral expression as text: the integer when bound, else sympy's form with shared
    labels written qualified."""
    if names:
        swap = {s: sympy.Symbol(n) for s, n in names.items() if n != s.label}
        if swap and env is not None:
            expr = env.subs(expr)
        if swap:
            expr = sympy.sympify(expr).xreplace(swap)
    return size_text(expr, env)
