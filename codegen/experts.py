"""Expert parallelism read off the IR: which generated classes can hold one rank's slice of a
selected sparse axis.

A class generated in pairs mode (``codegen/pairs.py``) computes the arrays on a top-k sparse axis
(``k/e``) at the (row, slot) pairs its caller's selection passes in; the caller's contraction
over the axis is gated by that selection. When every parameter of the class that holds the axis
is a ``Linear`` weight or bias read one slot at a time (``pairwise_matmul``) and nothing else on
the axis is read, a pair needs only its row's inputs and its slot's slice of those parameters:
the class can hold a contiguous slice of the axis (the experts of one rank) and run the pairs
whose slot falls in it. Such a class gets two class attributes, read by the prelude's
``shard_experts`` (``codegen/prelude/distributed.py``):

* ``EXPERT_DIMS``: (parameter attribute, the dim of the sparse axis in it) pairs;
* ``INPUT_RANKS``: the trailing rank of every positional input (the leading dims are the rows
  the pairs index).

Nothing names a block: the query is "a ``Linear`` over a sparse axis, in a class called with a
selection's pairs, whose every output is a pairs array".
"""
from __future__ import annotations

from .classinfo import INDENT
from .names import comment_text


def note_expert_param(own, sel, code: str, dim: int) -> None:
    """Record that ``code`` (a parameter) holds the pairs argument's axis at ``dim`` (``own``:
    the class's pairs argument, ``sel``: the selection the parameter is read at)."""
    if sel is not own:
        return
    attr = code.removeprefix("self.")
    if not code.startswith("self.") or not attr.isidentifier():
        note_unsliceable(own, sel, f"a parameter on the sparse axis read as {code}")
    else:
        sel.expert_dims[attr] = dim


def note_unsliceable(own, sel, reason: str) -> None:
    """The class cannot run on a slice of its pairs argument's axis ``own`` (the first reason
    wins; ``sel``: the selection met)."""
    if sel is not None and sel is own and sel.unsliceable is None:
        sel.unsliceable = reason


def expert_facts(sel, pairs_outputs: tuple, input_ranks: list[int]):
    """``(EXPERT_DIMS, INPUT_RANKS)`` of a pairs-mode class (``sel``: its pairs argument,
    ``pairs_outputs``: per output, whether it is a pairs array) that can hold a slice of its
    axis, else None."""
    if sel is None or sel.unsliceable is not None or not pairs_outputs \
            or not all(pairs_outputs):
        return None
    return dict(sel.expert_dims), tuple(input_ranks)


def expert_attribute_lines(gen, info, selection) -> list[str]:
    """The class attribute lines for :func:`expert_facts`, which only the ``distributed``
    runtime reads (none for other classes or without it; ``info``: the class's ClassInfo,
    ``selection``: its pairs argument)."""
    facts = info.experts
    if facts is None or "distributed" not in gen.runtime:
        return []
    dims, ranks = facts
    axis = comment_text(selection.axis.label, 20)
    return [INDENT + f"EXPERT_DIMS = {tuple(dims.items())!r}  # the dim of {axis} in "
            "each parameter on it",
            INDENT + f"INPUT_RANKS = {ranks!r}  # trailing dims of each input (shard_experts)",
            ""]


__all__ = ["expert_attribute_lines", "expert_facts", "note_expert_param", "note_unsliceable"]
