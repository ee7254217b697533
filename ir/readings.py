"""Readings: how a diagram's operators are understood.

* ``faithful`` (the default): every node means what docs/format.md and its own fields say.
* ``pyncd``: a compatibility reading that computes what pyncd's own torch lowering computes
  where that departs from the diagram (evidence in interpreter/READINGS.md): every operator
  declared ``Elementwise`` or ``ReLU`` is ReLU, whatever its name; every ``Normalize`` is a
  LayerNorm over its target axes (mean subtracted, biased variance, epsilon 1e-5) with a learned
  gain (initialised 1) and shift (initialised 0) exposed as parameters.

A reading is an IR-to-IR rewrite (:func:`apply_reading`), the first pass of
:func:`ir.pipeline.normalize`, so the interpreter and the code generator implement each
operator once; shared terms stay shared.
"""
from __future__ import annotations

import dataclasses

import sympy

from .morphisms import Morphism
from .operators import Elementwise, Normalize, Operator
from .rebuild import rebuild

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


def apply_reading(morphism: Morphism, reading: str = "faithful", sources=None) -> Morphism:
    """``morphism`` as ``reading`` understands it (itself under ``faithful``); ``sources`` as
    :func:`ir.rebuild.rebuild`'s."""
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {', '.join(READINGS)}, not {reading!r}")
    if reading == "faithful":
        return morphism
    return rebuild(morphism, lambda t: pyncd_operator(t) if isinstance(t, Operator) else t,
                   sources)
