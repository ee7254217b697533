"""Readings: how a diagram's operators are understood.

* ``faithful`` (the default): every node means what docs/format.md and its own fields say.
* ``pyncd``: a compatibility reading that computes what pyncd's own torch lowering computes
  where that departs from the diagram (evidence in interpreter/READINGS.md): every operator
  declared ``Elementwise`` or ``ReLU`` is ReLU, whatever its name; every ``Normalize`` is a
  LayerNorm over its target axes (mean subtracted, biased variance, epsilon 1e-5) with a learned
  gain (initialised 1) and shift (initialised 0) exposed as parameters.

A reading is an IR-to-IR rewrite (:func:`apply_reading`), so the interpreter and the code
generator implement each operator once; shared terms stay shared.
"""
from __future__ import annotations

import dataclasses

import sympy

from .morphisms import Morphism
from .operators import Elementwise, Normalize, Operator

READINGS = ("faithful", "pyncd")

LAYER_NORM_EPSILON = sympy.Rational(1, 10**5)
"""``torch.nn.LayerNorm``'s default ``eps``."""

PYNCD_RELU_KINDS = ("Elementwise", "ReLU")
"""Declared kinds pyncd lowers to ``torch.relu`` (``Dropout`` and ``Identity`` have no lowering
there and keep their faithful meaning)."""


def pyncd_operator(op: Operator) -> Operator:
    """One operator under the pyncd reading (nested operators are rewritten by the caller)."""
    if isinstance(op, Elementwise) and op.declared in PYNCD_RELU_KINDS:
        return op if op.function == "relu" else dataclasses.replace(op, function="relu")
    if isinstance(op, Normalize):
        return dataclasses.replace(op, centred=True, gain=True, bias=True,
                                   epsilon=LAYER_NORM_EPSILON)
    return op


def apply_reading(morphism: Morphism, reading: str = "faithful") -> Morphism:
    """``morphism`` as ``reading`` understands it (itself under ``faithful``)."""
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {', '.join(READINGS)}, not {reading!r}")
    if reading == "faithful":
        return morphism
    return _Rewrite(pyncd_operator).term(morphism)


class _Rewrite:
    """Rebuild the terms whose operators change, memoised by identity (a term shared by several
    sites is rebuilt once and stays shared); unchanged terms are kept as they are."""

    def __init__(self, rule):
        self.rule = rule
        self.memo: dict[int, object] = {}

    def term(self, t):
        key = id(t)
        if key in self.memo:
            return self.memo[key]
        out = self._rebuild(t)
        self.memo[key] = out
        return out

    def _rebuild(self, t):
        if isinstance(t, tuple):
            items = tuple(self.term(x) for x in t)
            return t if all(a is b for a, b in zip(items, t)) else items
        if isinstance(t, dict):  # a Truncated term's recovered fields
            items = {k: self.term(v) for k, v in t.items()}
            return t if all(items[k] is v for k, v in t.items()) else items
        if not isinstance(t, (Morphism, Operator)) or not dataclasses.is_dataclass(t):
            return t
        changes = {}
        for f in dataclasses.fields(t):
            if f.name == "path" or not f.init:
                continue
            val = getattr(t, f.name)
            if isinstance(val, (Morphism, Operator, tuple, dict)):
                new = self.term(val)
                if new is not val:
                    changes[f.name] = new
        out = dataclasses.replace(t, **changes) if changes else t
        return self.rule(out) if isinstance(out, Operator) else out
