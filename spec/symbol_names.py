"""Readable names of size and constant symbols, also when two symbols share a label.

A symbol whose label no other symbol carries is named by its label (``m``). When several share
a label (pyncd's ``transformer.json`` has two ``k`` and two ``v``), each is named
``label@where``, ``where`` being the first of these that tells it apart from its namesakes: the
innermost block title at its first use in the data, the operator at that use, then the outer
block titles (``k@L_{q}`` and ``k@L_{v}``, ``v@Embedding`` and ``v@Aggregator``), trying its
later uses when the first tells nothing apart. A symbol only the repository uses is
``label@repository``; one still not told apart falls back to ``id:<uid>``.

``spec.bindings.bind`` takes ``id:<uid>``; the command line and the API translate qualified
names to it (``ncdc.sizenames``).
"""
from __future__ import annotations

from collections import defaultdict

from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.numeric import FreeNumeric


def _where(sym: FreeNumeric, uses, nodes) -> list[str]:
    """Qualifier candidates of ``sym``, most specific first."""
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


def qualified_names(symbols, uses, nodes) -> dict[FreeNumeric, str]:
    """``symbols`` -> readable name. ``uses``: ``checks_binding.symbol_uses`` of the data's
    sites; ``nodes``: JSON path -> morphism of those sites."""
    syms = sorted(set(symbols), key=lambda s: s.uid)
    groups: dict[str, list[FreeNumeric]] = defaultdict(list)
    for s in syms:
        groups[s.label].append(s)
    names = {s: s.label for s in syms}
    for group in groups.values():
        if len(group) < 2:
            continue
        cands = {s: _where(s, uses, nodes) for s in group}
        for s in group:
            others = {c for o in group if o is not s for c in cands[o]}
            pick = next((c for c in cands[s] if c not in others), None)
            names[s] = f"{s.label}@{pick}" if pick is not None else f"id:{s.uid}"
        if len({names[s] for s in group}) < len(group):  # two picks collided
            for s in group:
                names[s] = f"id:{s.uid}"
    return names


def has_namesakes(symbols) -> bool:
    labels = [s.label for s in set(symbols)]
    return len(set(labels)) < len(labels)
