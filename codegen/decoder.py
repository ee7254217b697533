"""Incremental decoding in generated files: ``prefill`` and ``step`` on the root class.

The one mechanism (:mod:`ir.incremental` decides where it applies): ``forward`` runs on the new
tokens only; every look-back read along the token axis becomes a ``token_read`` (prelude
``decoding``) that puts the entries the state kept in front of the new ones and keeps the last
``keep`` for the next call; rotary positions start at ``tokens_before()``. ``prefill`` and
``step`` wrap ``forward`` with that state, a dict of fixed-shape tensors (the counter a 0-d
tensor, each read's ``keep`` entries dead before the first token), so a compiled ``step`` is one
graph for every position. A block that works position by position needs neither
(``forward`` on the new tokens is its step), nor does one that is not incremental (an unbounded
read) get them; one that reads later tokens is not causal (``ir.incremental``).
"""
from __future__ import annotations

from ncdc.ir.axes import is_token_axis
from ncdc.ir.errors import SpecError
from ncdc.ir.incremental import Analysis, analyse, classify_reindexing
from ncdc.ir.morphisms import Broadcasted, Morphism

from .names import string_literal


def read_call(gen, size_code, taken: set, b: Broadcasted, k: int, general: list[int], name: str):
    """``read(site)`` -> the opening of the call that reads input ``k`` of ``b`` through its
    general rows ``general``: ``affine_read(``, or for a look-back along the token axis
    ``token_read(self, "<site>", <keep>, `` (the source, rows, sizes and dim follow; ``taken``:
    the class's site keys so far, ``size_code``: forward's size printer; a plain
    ``affine_read(`` without the ``decoding`` runtime)."""
    kind, row, keep, _reach, _why = classify_reindexing(b, k)
    if kind != "lookback" or row not in general or "decoding" not in gen.runtime:
        return lambda site: "affine_read("
    gen.prelude.add("decoding")
    keep_code = size_code(keep)
    pos = general.index(row)

    def read(site: str) -> str:
        base, n = site or name, 1
        while site in taken or not site:
            n += 1
            site = f"{base}_{n}"
        taken.add(site)
        key = f"{site}@{pos}" if pos else site  # "@k": the token dim is the map's row k
        return f"token_read(self, {string_literal(key)}, {keep_code}, "
    return read


def token_input(root: Morphism) -> tuple[int, int] | None:
    """(input index, dim counted from the end) of the first token axis of ``root``'s inputs."""
    for k, arr in enumerate(root.dom):
        shape = tuple(arr.shape)
        for i, a in enumerate(shape):
            if is_token_axis(a):
                return k, i - len(shape)
    return None


def decoder_analysis(root: Morphism) -> Analysis | None:
    """The analysis of ``root`` when it gets ``prefill`` and ``step`` (it is incremental and
    reads back along the token axis or reads positions), else None."""
    try:
        if token_input(root) is None:
            return None
        a = analyse(root)
    except SpecError:
        return None
    if not a.incremental or not (a.lookbacks or a.positions) or a.recurrences:
        return None  # not decodable, or position by position: ``forward`` decodes it; a
        # Scan over the tokens carries a state the generated ``step`` does not keep yet
    return a


def decoder_methods(gen, root: Morphism, indent: str) -> str:
    """The ``prefill`` and ``step`` methods of the root class ('' when the block does not
    decode incrementally)."""
    a = decoder_analysis(root)
    if a is None:
        return ""
    gen.prelude.add("decoding")
    tokens = token_input(root)
    kept = ", ".join(sorted({f"{r.label} keeps {r.keep}" for r in a.lookbacks})) or \
        "no read reaches back"
    i2 = indent * 2
    return "\n".join([
        "",
        f"{indent}def prefill(self, *inputs, **kwargs):",
        f'{i2}"""``forward`` on the first tokens of a sequence: ``(outputs, state)``, the state',
        f"{i2}for ``step`` (prelude ``decoding``; {kept}).\"\"\"",
        f"{i2}return decode(self, None, inputs, kwargs, tokens={tokens!r})",
        "",
        f"{indent}def step(self, *inputs, state, **kwargs):",
        f'{i2}"""``forward`` on the next tokens of the sequence ``state`` continues, as the',
        f"{i2}whole sequence at once would give them: ``(outputs, state)``. The state's shapes",
        f"{i2}never change, so ``torch.compile(model.step, fullgraph=True)`` compiles once per",
        f"{i2}token count.\"\"\"",
        f"{i2}return decode(self, state, inputs, kwargs, tokens={tokens!r})",
        "",
    ])


__all__ = ["decoder_analysis", "decoder_methods", "read_call", "token_input"]
