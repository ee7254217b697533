"""Incremental decoding through repetition and composition, on hand-made terms: a block
repeated three times, each iteration with its own weights and its own window over the previous
iteration's output (so the look-backs compose: the third iteration's output depends on tokens
up to 3 (w - 1) back), checked against the interpreter's whole sequence."""
from __future__ import annotations

import pytest
import sympy

from ncdc.codegen import generate
from ncdc.ir import Linear, View
from ncdc.ir.axes import RawAxis
from ncdc.ir.env import Env
from ncdc.ir.incremental import analyse
from ncdc.ir.names import Name
from ncdc.ir.numeric import FreeNumeric
from ncdc.verify.decoder_check import decode_and_compare, prepare
from tests.oracles.ir_build import R, axis, bc, block, composed, rearr, stride, weave

TOKENS = FreeNumeric(990_001, Name("b"))
ENV = Env({TOKENS: 9})


def _repeated(width=3, channels=2, repetition=3):
    """``R[x, m] -> R[x, m]``, ``x`` of a size the data fixes (as the bundled spec's)."""
    x = RawAxis(990_002, Name("x"), TOKENS)
    w, m = axis("w", width), axis("m", channels)
    win = bc(View(Name("win")), [weave(R, "*", "*")], [weave(R, "*", "*", "*")],
             [stride([x, w, m], [(x, [1, -1, 0], 0), (m, [0, 0, 1], 0)])])
    mix = bc(Linear(Name("W")), [weave(R, "*", w, m)], [weave(R, "*", m)], [rearr([0], x)])
    return block(composed(win, mix), "Windowed Layer", repetition), w


def test_repetition_counts_each_iteration():
    term, w = _repeated()
    (read,) = analyse(term).lookbacks
    assert read.count == 3 and sympy.expand(read.keep - (w.size - 1)) == 0


@pytest.mark.parametrize(("prefill", "chunks"), [(1, (1,)), (2, (3, 1)), (5, (2,))])
@pytest.mark.parametrize("quant", ["exact", "emulate"])
def test_repeated_windows_decode(prefill, chunks, quant):
    term, _ = _repeated()
    res = decode_and_compare(prepare(term, ENV, quant=quant), prefill, chunks)
    assert res.ok, res.problem
    wins = sorted(k for k in res.state_entries if k != "tokens")
    assert len(wins) == 3  # one window per iteration
    assert {res.state_entries[k] for k in wins} == {(2, 2)}


def test_generated_source_keeps_one_window_per_iteration():
    term, _ = _repeated()
    src = generate(term, ENV, runtime={"decoding"}).source
    assert "def prefill(" in src and "def step(" in src and "token_read(" in src
