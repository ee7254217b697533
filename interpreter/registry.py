"""The evaluation rule of every operator kind, registered by IR class.

A rule is ``rule(b, inputs, ctx) -> list[Value]``:

* ``b`` is the :class:`~ir.morphisms.Broadcasted` being evaluated;
* ``inputs[k]`` is input ``k`` already *lifted* (docs/format.md §9.2): read through its reindexing
  into shape ``(*lead, *target_k)`` where ``lead = (*batch, *degree)`` — ``batch`` are the
  dimensions of enclosing lifted blocks — and any lead dimension may be 1 (broadcast);
* ``ctx`` is a :class:`~interpreter.context.RuleContext` (env, quant mode, the occurrence's
  parameters, memoised sizes and constants).

It returns one ``Value`` per output weave shaped ``(*lead', *target_j)`` (``lead'``
broadcastable to ``lead``; a rule may return just the target shape) with dead positions
holding 0. The plan (:mod:`interpreter.plan`) moves the degree dimensions into each output
weave's TILED positions and applies the quantisation policy (``interpreter/QUANT_POLICY.md``).
A rule is the only statement of its operator's numpy meaning.
"""
from __future__ import annotations

from collections.abc import Callable

RULES: dict[type, Callable] = {}
"""Operator class -> evaluation rule. Covers every class of ``ir.operators.ALL_OPERATORS``
once ``interpreter`` is imported."""


def rule(*classes: type):
    """Register the decorated function as the rule of ``classes``."""

    def deco(fn):
        for cls in classes:
            if cls in RULES:
                raise RuntimeError(f"two evaluation rules for {cls.__name__}")
            RULES[cls] = fn
        return fn

    return deco


def rule_for(op) -> Callable:
    """The rule of an operator instance (most specific registered class first)."""
    for cls in type(op).__mro__:
        fn = RULES.get(cls)
        if fn is not None:
            return fn
    raise KeyError(type(op).__name__)


KERNELS: dict[type, Callable] = {}
"""Operator class -> kernel factory: the rule's all-live, ``exact``-mode case on plain arrays,
for compiled plans (:mod:`interpreter.plan`). ``factory(b, ctx)`` is called once per site and
returns ``kernel(arrays, params) -> list[ndarray]`` — the same values the rule computes when
every input is live (and every result then is) — or None where the site's form is not covered.
A kernel binds the rule's own all-live computation (a function of the rule's module both call)
to the site's constants once; it states no maths of its own."""


def kernel(*classes: type):
    """Register the decorated function as the kernel factory of ``classes``."""

    def deco(fn):
        for cls in classes:
            if cls in KERNELS:
                raise RuntimeError(f"two kernels for {cls.__name__}")
            KERNELS[cls] = fn
        return fn

    return deco


def kernel_for(b, ctx):
    """The kernel of the site ``b`` (None when its operator has none or its form is not
    covered)."""
    factory = KERNELS.get(type(b.operator))
    return None if factory is None else factory(b, ctx)
