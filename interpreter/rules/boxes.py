"""Boxes (docs/format.md §10.4–§10.5): the block applied at every degree index, i.e. evaluated
*lifted* — the box's ``(*batch, *degree)`` becomes the block's batch.

``ParaBlockOperator``: inputs are one per grab first, then the block's operands; the grabbed
operands are bound into the tape before the block runs (so the box also works where nothing
wrote the slot yet); outputs are the block's results, then each dropped slot read back."""
from __future__ import annotations

from ncdc.ir.operators import BlockOperator, ParaBlockOperator

from ..registry import rule


@rule(BlockOperator)
def block_operator(b, inputs, ctx):
    block = b.operator.block
    if len(inputs) != len(block.dom):
        raise ctx.error(f"the box has {len(inputs)} inputs but its block takes "
                        f"{len(block.dom)}")
    return ctx.run_block(block, inputs)


@rule(ParaBlockOperator)
def para_block_operator(b, inputs, ctx):
    op = b.operator
    ng = len(op.grabs)
    if len(inputs) != ng + len(op.block.dom):
        raise ctx.error(f"the box has {len(inputs)} inputs for {ng} grabs and "
                        f"{len(op.block.dom)} block operands")
    for g, v in zip(op.grabs, inputs[:ng]):
        ctx.tape_write(g.tape, v, ctx.sizes(g.size.shape))
    results = ctx.run_block(op.block, inputs[ng:])
    return list(results) + [ctx.tape_read(d.tape) for d in op.drops]
