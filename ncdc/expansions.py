"""Operator expansions: the diagrams a viewer export writes out for its operators
(``auxiliary.expansions``, :mod:`ncdc.spec.auxiliary`), listed and checked against the
operator occurrence each one defines.

Expansion ``k`` belongs to the ``Broadcasted`` the importer numbers ``k``
(:func:`ncdc.spec.auxiliary.broadcast_paths`). The check runs the reference interpreter on the
occurrence (the operator's own numpy rule, lifted over its broadcast axes) and on the expansion
diagram, at the same sizes and on the same random inputs, and compares: ``agrees`` within a
relative ``1e-9`` of the largest output, else ``differs``. Where the two cannot be run side by
side it says why (``skipped``): no occurrence with that number, a different operator there,
domains or codomains of different shapes, inputs that are not real, learned parameters (the
two have no correspondence between their weights), an expansion that does not decode or
validate.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ncdc.ir.datatypes import kind as datatype_kind
from ncdc.ir.errors import SpecError
from ncdc.ir.walk import walk
from ncdc.spec.loader import load_expansion

from .api import Spec, interpret

TOLERANCE = 1e-9


@dataclass
class ExpansionCheck:
    """The outcome for expansion ``key``: ``status`` is ``agrees``, ``differs`` or
    ``skipped`` (``reason`` says why; for ``differs``, what the export says of it)."""

    key: int
    operator: str
    path: str | None
    status: str
    reason: str = ""
    max_abs: float | None = None
    max_rel: float | None = None

    def as_dict(self) -> dict:
        return {"key": self.key, "operator": self.operator, "json_path": self.path,
                "status": self.status, "reason": self.reason or None,
                "max_abs": self.max_abs, "max_rel": self.max_rel}


def occurrence_path(spec, key: int) -> str | None:
    """The JSON path of the ``Broadcasted`` numbered ``key`` (None: no such number)."""
    paths = spec.doc.broadcasts
    return paths[key] if 0 <= key < len(paths) else None


def expansion_spec(spec, key: int):
    """Expansion ``key`` of ``spec`` as a :class:`ncdc.api.Spec` of its own."""
    return Spec(load_expansion(spec.doc, key))


def _site(spec, path: str | None):
    if path is None:
        return None
    return next((s for s in walk(spec.data) if s.path == path), None)


def check_expansion(spec, key: int, preset: str = "tiny", seed: int = 0) -> ExpansionCheck:
    """Expansion ``key`` against its occurrence in ``spec`` (see the module doc)."""
    exp = spec.doc.auxiliary.expansions[key]
    path = occurrence_path(spec, key)
    out = ExpansionCheck(key, exp.operator, path, "skipped")
    site = _site(spec, path)
    if site is None:
        out.reason = (f"no Broadcasted is numbered {key}" if path is None else
                      f"occurrence {key} at {path} is not part of the diagram's data")
        return out
    kind = type(site.node.operator).__name__
    if kind != exp.operator:
        out.reason = f"occurrence {key} is a {kind}, not a {exp.operator}"
        return out
    try:
        sub = expansion_spec(spec, key)
        errors = [d for d in sub.validate() if d.severity == "error"]
        if errors:
            out.reason = f"the expansion does not validate: {errors[0]}"
            return out
        return _compare(out, spec, site.node, sub, preset, seed, exp)
    except SpecError as exc:
        out.reason = f"the expansion cannot be run: {exc}"
        return out


def _compare(out: ExpansionCheck, spec, node, sub, preset, seed, exp) -> ExpansionCheck:
    occ = interpret(node, spec=spec, preset=preset)
    mine = interpret(sub.data, spec=sub, preset=preset)
    for what, a, b in (("domain", occ.dom_shapes(), mine.dom_shapes()),
                       ("codomain", occ.cod_shapes(), mine.cod_shapes())):
        if [tuple(s) for s in a] != [tuple(s) for s in b]:
            out.reason = f"the expansion's {what} {b} is not the occurrence's {a}"
            return out
    if any(datatype_kind(a.datatype) != "real" for a in (*occ.dom, *mine.dom)):
        out.reason = "an input is not real (random inputs are drawn for real arrays only)"
        return out
    learned = [p.key for p in (*occ.param_specs, *mine.param_specs) if p.learned]
    if learned:
        out.reason = (f"learned parameters ({', '.join(learned[:3])}) have no counterpart "
                      "on the other side")
        return out
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(tuple(s)) for s in occ.dom_shapes()]
    want, got = occ(*inputs), mine(*inputs)
    diff = max((float(np.max(np.abs(np.asarray(w) - np.asarray(g)), initial=0.0))
                for w, g in zip(want, got, strict=True)), default=0.0)
    scale = max((float(np.max(np.abs(np.asarray(w)), initial=0.0)) for w in want),
                default=0.0)
    out.max_abs, out.max_rel = diff, diff / scale if scale else diff
    if out.max_rel <= TOLERANCE:
        out.status = "agrees"
    else:
        out.status = "differs"
        out.reason = _proportional(want, got) + (exp.description or "")
    return out


def _proportional(want, got) -> str:
    """``the operator's outputs are c times the expansion's; `` where that holds (within a
    relative 1e-6), else empty: a written-out formula that leaves a constant out."""
    w = np.concatenate([np.ravel(np.asarray(a, dtype=float)) for a in want])
    g = np.concatenate([np.ravel(np.asarray(a, dtype=float)) for a in got])
    gg = float(g @ g)
    if not gg or w.shape != g.shape:
        return ""
    c = float(w @ g) / gg
    scale = float(np.max(np.abs(w), initial=0.0))
    if not scale or float(np.max(np.abs(w - c * g))) > 1e-6 * scale:
        return ""
    return f"the operator's outputs are {c:.6g} times the expansion's; the export says: "


def check_expansions(spec, preset: str = "tiny", seed: int = 0) -> list[ExpansionCheck]:
    """Every expansion of ``spec``, in key order."""
    return [check_expansion(spec, k, preset, seed)
            for k in sorted(spec.doc.auxiliary.expansions)]


__all__ = ["TOLERANCE", "ExpansionCheck", "check_expansion", "check_expansions",
           "expansion_spec", "occurrence_path"]
