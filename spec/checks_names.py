"""Check of the spec's text: every name, title and label must be valid Unicode text.

JSON can spell a lone UTF-16 surrogate (``"\\ud800"``), which is no character: it cannot be
encoded as UTF-8, so it could be neither written into generated source nor hashed into a
parameter's seed. Such a string is ``name-invalid`` (an error), reported once per record, at
the record's JSON path.
"""
from __future__ import annotations

import re

from ncdc.ir.morphisms import Block, Broadcasted
from ncdc.ir.names import Name

_SURROGATE = re.compile("[\ud800-\udfff]")


def _bad(text) -> str | None:
    """The first lone surrogate of ``text``, as ``U+XXXX``, or None."""
    if not isinstance(text, str) or text.isascii():  # (most are: no search)
        return None
    m = _SURROGATE.search(text)
    return None if m is None else f"U+{ord(m.group()):04X}"


def _name_texts(name) -> list[str]:
    """Every string of a :class:`~ir.names.Name` (body, code form, subscript, exponent)."""
    if name is None:
        return []
    out: list[str] = []
    stack = [name]
    while stack:
        n = stack.pop()
        if not isinstance(n, Name):
            continue
        out.extend(t for t in (n.body, n.code_form) if isinstance(t, str))
        stack.extend((n.subscript, n.exponent))
    return out


def _record_texts(record) -> list[str]:
    """The strings of an axis, symbol, block tag or tape slot record."""
    texts: list[str] = []
    for attr in ("name", "display", "counter"):
        name = getattr(record, attr, None)
        if name is not None:  # (most records have no display name or counter)
            texts += _name_texts(name)
    for attr in ("title", "description", "formula", "fill_color"):
        value = getattr(record, attr, None)
        if isinstance(value, str):
            texts.append(value)
    return texts


def _check(ck, what: str, texts, path: str, titles=()) -> None:
    for text in texts:
        if text.__class__ is str and text.isascii():  # (most are: no call)
            continue
        bad = _bad(text)
        if bad is not None:
            ck.error("name-invalid", f"{what} {text[:40]!r} holds a lone surrogate ({bad}), "
                     "which is not a character: names must be valid Unicode text",
                     path, titles)
            return


def check_names(ck, doc, sites) -> None:
    """``name-invalid`` for every record of ``doc``'s repository (when ``doc`` is a loaded
    document) and every block tag and operator of ``sites`` whose text holds a lone
    surrogate. A document whose text cannot spell one (``Document.no_surrogates``: ASCII, no
    ``\\uD`` escape) has none to find."""
    if getattr(doc, "no_surrogates", False):
        return
    seen: set[int] = set()
    for kind, records in (("axis", getattr(doc, "axes", {})),
                          ("symbol", getattr(doc, "symbols", {})),
                          ("block tag", getattr(doc, "tags", {})),
                          ("tape slot", getattr(doc, "tape_slots", {}))):
        for rec in records.values():
            seen.add(id(rec))
            _check(ck, kind, _record_texts(rec), getattr(rec, "path", ""))
    for s in sites:
        node = s.node
        if isinstance(node, Block) and id(node.tag) not in seen:
            seen.add(id(node.tag))
            _check(ck, "block tag", _record_texts(node.tag), s.path, s.titles)
        elif isinstance(node, Broadcasted):
            _check(ck, "operator name", _name_texts(node.operator.name),
                   node.operator.path or s.path, s.titles)
        else:
            _check(ck, "name", _name_texts(getattr(node, "name", None)), s.path, s.titles)


__all__ = ["check_names"]
