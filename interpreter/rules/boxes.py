"""Boxes (docs/format.md §10.4–§10.5): the block applied at every degree index, i.e. evaluated
*lifted* — the box's ``(*batch, *degree)`` becomes the block's batch.

A box has no numpy rule of its own: the plan inlines its block (``interpreter.plan._Builder.box``:
the inputs lifted, a ``ParaBlockOperator``'s grabbed operands bound into the tape first, the
body over the lifted batch, each dropped slot read back after the block's results). The rule
registered here only says so, should anything apply it as an operator."""
from __future__ import annotations

from ncdc.ir.operators import BlockOperator, ParaBlockOperator

from ..registry import rule


@rule(BlockOperator, ParaBlockOperator)
def inlined_box(b, inputs, ctx):
    raise ctx.error("a box is inlined by the plan (interpreter/plan.py), not applied as a rule")
