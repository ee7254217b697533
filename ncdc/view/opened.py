"""The operator expansions a view can open: each ``Broadcasted`` occurrence that the file's
``auxiliary.expansions`` defines (:mod:`ncdc.spec.auxiliary`), with the expansion's own
diagram decoded, keyed by the occurrence's JSON path.

An expansion's own expansions are read the same way, down to ``MAX_DEPTH`` levels of
definitions. An expansion that does not decode is kept with its error, so the view still
marks the occurrence and says why it cannot open.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ncdc.ir.errors import SpecError
from ncdc.ir.morphisms import Morphism
from ncdc.spec.loader import Document, load_expansion

MAX_DEPTH = 3


@dataclass(frozen=True)
class Opening:
    """Expansion ``key`` of an occurrence of ``operator``: ``root`` its diagram (None where it
    does not decode: ``error`` says why), ``inner`` the openings inside that diagram."""

    key: int
    operator: str
    root: Morphism | None
    error: str = ""
    formula: str = ""
    description: str = ""
    inner: dict[str, Opening] = field(default_factory=dict)


def openings(doc: Document, depth: int = MAX_DEPTH) -> dict[str, Opening]:
    """The openings of ``doc`` by occurrence path (an expansion numbered past the last
    occurrence has nothing to open from and is left out)."""
    out: dict[str, Opening] = {}
    if depth <= 0:
        return out
    for key, exp in sorted(doc.auxiliary.expansions.items()):
        if not 0 <= key < len(doc.broadcasts):
            continue
        text = {"formula": exp.formula or "", "description": exp.description or ""}
        try:
            sub = load_expansion(doc, key)
        except SpecError as exc:
            out[doc.broadcasts[key]] = Opening(key, exp.operator, None, str(exc), **text)
            continue
        out[doc.broadcasts[key]] = Opening(key, exp.operator, sub.data, "", **text,
                                           inner=openings(sub, depth - 1))
    return out


__all__ = ["MAX_DEPTH", "Opening", "openings"]
