"""The normalisation pipeline: every IR -> IR rewrite, once per root, in a named order.

:func:`normalize` is the only place a rewrite is applied. Each backend calls it at its entry
(:func:`interpreter.interpret` when it prepares a morphism, :func:`codegen.generate` before it
lowers one) and then walks the normalized term as it is: no backend matches or rewrites a
pattern inside its walk. Each pass runs once per term (memoised by identity while the term
lives), so the two backends, the check tools that run both on one root, and repeated calls
share the results; a pass's result is its own fixed point, so a normalized term normalizes to
itself.

The passes, in order (:data:`PASSES`):

1. ``reading`` — the reading (:mod:`ir.readings`): ``faithful`` keeps the term, ``pyncd``
   rewrites the operators pyncd lowers differently;
2. ``sink_shift`` — every softmax with a sink term gets a :class:`~ir.rewrites.SinkShift`
   before its exponentials (:func:`~ir.rewrites.stable_composition`);
3. ``softmax`` — every ``e^x ; L1Norm`` pair with no epsilon becomes ``identity ; SoftMax``
   (:func:`~ir.rewrites.softmax_pairs`);
4. one fusion, the one the caller names (:data:`FUSIONS`; a backend asks for the one it
   lowers, or none):

   - ``bank_diagonal`` — every bank ``Linear ; diagonal View`` pair is grouped as one
     :class:`~ir.rewrites.BankDiagonal` (:func:`~ir.rewrites.bank_diagonals`): the
     interpreter's (:mod:`interpreter.fusion` evaluates it as one contraction);
   - ``contraction_view`` — every contraction followed by a relabelling ``View`` is grouped
     as one :class:`~ir.rewrites.ContractionView` (:func:`~ir.rewrites.contraction_views`):
     the code generator's (one einsum placing its result where the View puts it).

Passes 2–4 act on compositions, each over the whole term, children first. Every pass keeps
parameter keys (:func:`ir.params.param_specs` gives the same keys before and after), tape
slots and JSON paths; terms a pass does not change stay the same objects, and
:func:`source` maps a rebuilt node back to the caller's (the interpreter's hooks receive the
spec's blocks). ``ir.rewrites.stable`` (safe forms of one formula) is no pass: it needs the
formula's constants bound, so each backend's formula lowering applies it. Pure IR: no numpy,
torch or JSON.
"""
from __future__ import annotations

import functools
import weakref

from .morphisms import Composed, Morphism
from .readings import apply_reading
from .rebuild import rebuild
from .rewrites import bank_diagonals, contraction_views, softmax_pairs, stable_composition


def _on_compositions(fn):
    def run(root, sources=None, **_options):
        return rebuild(root, lambda t: fn(t) if isinstance(t, Composed) else t, sources)

    return run


def _reading(root, reading: str = "faithful", sources=None, **_options):
    return apply_reading(root, reading, sources)


PASSES = (
    ("reading", _reading),
    ("sink_shift", _on_compositions(stable_composition)),
    ("softmax", _on_compositions(softmax_pairs)),
    ("bank_diagonal", _on_compositions(bank_diagonals)),
    ("contraction_view", _on_compositions(contraction_views)),
)
"""(name, pass): ``pass(root, reading=..., sources=...) -> root`` (``sources``: a list the
pass appends ``(new node, node it replaces)`` to), applied in this order, of the
:data:`FUSIONS` only the one asked for."""

FUSIONS = ("bank_diagonal", "contraction_view")
"""The passes that group a pattern for one backend's lowering: at most one runs."""

_MEMO: dict[tuple, tuple] = {}
"""``(id(term), pass name, reading) -> (weak reference to term, its result or None for the term
itself)``: each pass runs once per term (so options that share leading passes share their
results); an entry goes with its term (a result holds no reference to the term it came
from)."""


def normalize(root: Morphism, *, reading: str = "faithful", fusion: str | None = "bank_diagonal",
              skip=()) -> Morphism:
    """``root`` after every pass of :data:`PASSES` but the :data:`FUSIONS` other than
    ``fusion`` (None: no fusion) and those named in ``skip`` (the literal forms, for tests
    that compare with them)."""
    unknown = set(skip) - {name for name, _ in PASSES}
    if unknown:
        raise ValueError(f"no pass named {', '.join(sorted(unknown))}")
    if fusion is not None and fusion not in FUSIONS:
        raise ValueError(f"no fusion named {fusion}")
    out = root
    for name, step in PASSES:
        if name not in skip and (name == fusion or name not in FUSIONS):
            out = _apply(name, step, out, reading)
    return out


def _apply(name, step, term, reading):
    key = (id(term), name, reading if name == "reading" else None)
    hit = _MEMO.get(key)
    if hit is not None and hit[0]() is term:
        return term if hit[1] is None else hit[1]
    found: list = []
    out = step(term, reading=reading, sources=found)
    for new, old in found:
        _remember_source(new, old)
    ref = _weak(term, _MEMO, key)
    if ref is None:                    # not weakly referable: not memoised
        return out
    _MEMO[key] = (ref, None if out is term else out)
    if out is not term:                # a pass's result is its own fixed point
        _apply_fixed(name, out, reading)
    return out


def _apply_fixed(name, out, reading):
    key = (id(out), name, reading if name == "reading" else None)
    ref = _weak(out, _MEMO, key)
    if ref is not None:
        _MEMO[key] = (ref, None)


_SOURCES: dict[int, tuple] = {}
"""``id(rebuilt term) -> (weak reference to it, the term it replaces)``."""


def _remember_source(new, old) -> None:
    key = id(new)
    ref = _weak(new, _SOURCES, key)
    if ref is not None:
        _SOURCES[key] = (ref, old)


def _drop(table: dict, key, _ref) -> None:
    table.pop(key, None)


def _weak(term, table: dict, key):
    """A weak reference to ``term`` that drops ``table[key]`` when ``term`` goes (None where
    ``term`` is not weakly referable)."""
    try:
        return weakref.ref(term, functools.partial(_drop, table, key))
    except TypeError:
        return None


def source(term):
    """The term of the caller's input that ``term`` (a node of a normalized term) stands for:
    itself where no pass rebuilt it (a hook that keys by the spec's blocks sees them)."""
    while True:
        hit = _SOURCES.get(id(term))
        if hit is None or hit[0]() is not term:
            return term
        term = hit[1]


__all__ = ["FUSIONS", "PASSES", "normalize", "source"]
