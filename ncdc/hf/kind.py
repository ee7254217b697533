"""Whether a diagram is a causal language model, read from its IR.

A diagram is one when it takes one array of token ids, ``Nat<V>[x]``, and returns one real
array ``[x, v]`` over the same token axis ``x``, with ``v <= V`` under the binding (a predicted
token is a valid next input). It outputs probabilities when the last operator on the way to its
output is a softmax; otherwise its output is taken as logits.
"""
from __future__ import annotations

from dataclasses import dataclass

from ncdc.ir.datatypes import Natural, Reals, strip
from ncdc.ir.errors import SpecError
from ncdc.ir.incremental import analyse
from ncdc.ir.morphisms import Block, Broadcasted, Composed
from ncdc.ir.operators import SoftMax


@dataclass(frozen=True)
class LanguageModel:
    """A causal LM's vocabulary: ``vocab`` predicted tokens, ``inputs`` accepted token ids;
    ``probabilities``: the output is a distribution (a softmax), not logits."""

    vocab: int
    inputs: int
    probabilities: bool


def _last_operator(morphism):
    """The operator of the leaf that computes ``morphism``'s last output, following the last
    step of compositions and the bodies of blocks; None where the structure branches."""
    node = morphism
    while True:
        if isinstance(node, Block):
            node = node.body
        elif isinstance(node, Composed) and node.content:
            node = node.content[-1]
        elif isinstance(node, Broadcasted):
            return node.operator
        else:
            return None


def language_model(morphism, env) -> LanguageModel | None:
    """The vocabulary of ``morphism`` where it maps token ids to a distribution or logits over a
    vocabulary (see the module docstring), else None."""
    if len(morphism.dom) != 1 or len(morphism.cod) != 1:
        return None
    ids, out = morphism.dom[0], morphism.cod[0]
    dt = strip(ids.datatype)
    if not isinstance(dt, Natural) or len(ids.shape) != 1:
        return None
    if not isinstance(strip(out.datatype), Reals) or len(out.shape) != 2:
        return None
    if out.shape[0].uid != ids.shape[0].uid:
        return None
    vocab, inputs = env.size(out.shape[1].size), env.size(dt.max_value)
    if vocab > inputs:
        return None
    return LanguageModel(vocab, inputs, isinstance(_last_operator(morphism), SoftMax))


def decoding(morphism, has_step: bool, tokens) -> str:
    """How the export decodes: ``state`` (the generated ``prefill``/``step`` and their state),
    ``positionwise`` (incremental without look-backs or positions: ``forward`` on the new tokens
    is the step), or ``recompute`` (a read over the whole token axis: no bounded state);
    ``tokens``: where the token axis is among the inputs (None: nowhere)."""
    if has_step:
        return "state"
    if tokens is None:
        return "recompute"
    try:
        a = analyse(morphism)
    except SpecError:
        return "recompute"
    return "positionwise" if a.incremental else "recompute"


__all__ = ["LanguageModel", "decoding", "language_model"]
