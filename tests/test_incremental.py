"""Incremental decoding, the analysis side (``ir/incremental.py``): which reads along the token
axis each block makes, the typed error for a read of later tokens, the decoder state that
``ncdc cost`` reports at released sizes, and the pyncd transformer's attention, which is not
incremental (and, read faithfully, not even causal: shown numerically)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import sympy

from ncdc import interpreter
from ncdc.cli import main
from ncdc.ir.cost import cost
from ncdc.ir.errors import NonCausalError, SpecError
from ncdc.ir.incremental import analyse, classify_reindexing
from ncdc.ir.morphisms import Block, ProductOfMorphisms, StrideMorphism, StrideRow


def _sym(spec, label):
    (s,) = [s for s in spec.symbols.values() if s.label == label]
    return s


def _win(spec):
    """The ``View win`` of Sliding Window Attention and its reindexing."""
    (read,) = analyse(spec.block("Sliding Window Attention")).lookbacks
    return read


def test_bundled_reads(bundled):
    swa = analyse(bundled.block("Sliding Window Attention"))
    assert swa.incremental and swa.has_tokens
    (win,) = swa.lookbacks
    w = _sym(bundled, "w")
    assert win.label == "View win" and sympy.expand(win.keep - (w - 1)) == 0
    assert win.path.endswith(".reindexings[0]") and "Sliding Window Attention" in win.titles
    assert len(swa.of_kind("position")) == 3  # query, key and inverse rotations
    engram = analyse(bundled.block("Engram of Layer 1"))
    (ngram,) = engram.lookbacks
    assert sympy.expand(ngram.keep - (_sym(bundled, "L") - 1)) == 0
    assert not engram.positions
    assert not analyse(bundled.block("Mixing Coefficients")).has_tokens
    whole = analyse(bundled.model())
    assert whole.incremental
    assert sorted(r.label for r in whole.lookbacks) == ["View ngram", "View win"]


def _with_row(b, strides, shift):
    """The win read ``x <- strides . (x, w) + shift`` instead of ``x - w``."""

    def swap(m):
        if isinstance(m, StrideMorphism):
            (row,) = m.rows
            return dataclasses.replace(m, rows=(StrideRow(
                row.axis, tuple(sympy.sympify(s) for s in strides), sympy.sympify(shift)),))
        if isinstance(m, Block):
            return dataclasses.replace(m, body=swap(m.body))
        if isinstance(m, ProductOfMorphisms):
            return dataclasses.replace(m, content=(swap(m.content[0]),) + m.content[1:])
        raise AssertionError(f"unexpected {type(m).__name__}")

    return dataclasses.replace(b, reindexings=(swap(b.reindexings[0]),) + b.reindexings[1:])


def _win_site(bundled):
    from ncdc.ir.morphisms import Broadcasted
    from ncdc.ir.walk import walk

    for s in walk(bundled.block("Sliding Window Attention")):
        if isinstance(s.node, Broadcasted) and getattr(s.node.operator, "label", "") == "win":
            return s.node
    raise AssertionError("no win view")


@pytest.mark.parametrize(("strides", "shift", "kind", "keep"), [
    ((1, -1), 0, "lookback", "w - 1"),      # the window as the spec has it
    ((1, -2), 0, "lookback", "2*w - 2"),    # every other token
    ((1, -1), -3, "lookback", "w + 2"),     # shifted three further back
    ((1, 0), -1, "lookback", "1"),          # the previous token
    ((1, 0), 0, "none", "0"),               # the token itself
    ((1, 1), 0, "future", "0"),             # the next w - 1 tokens
    ((1, -1), 1, "future", "w - 1"),        # one ahead at the window's start
    ((2, -1), 0, "unbounded", "0"),         # token 2x: no fixed offset
])
def test_classify_window_rows(bundled, strides, shift, kind, keep):
    b = _with_row(_win_site(bundled), strides, shift)
    got, _row, k, _reach, why = classify_reindexing(b, 0)
    w = _sym(bundled, "w")
    assert got == kind, why
    assert sympy.expand(k - sympy.sympify(keep, locals={"w": w})) == 0


def test_future_read_is_a_typed_error(bundled):
    b = _with_row(_win_site(bundled), (1, 1), 0)
    a = analyse(b)
    assert not a.causal and not a.incremental
    with pytest.raises(NonCausalError) as exc:
        a.raise_if_not_causal()
    assert isinstance(exc.value, SpecError)
    assert "View win" in str(exc.value) and exc.value.json_path.endswith(".reindexings[0]")


def test_transformer_attention_is_not_incremental(transformer):
    core = transformer.block("Attention Core")
    a = analyse(core)
    assert a.causal and not a.incremental
    labels = sorted(r.label.split()[0] for r in a.of_kind("unbounded"))
    assert labels == ["Einops", "SoftMax", "WeightedTriangularLower"]
    sm = next(r for r in a.of_kind("unbounded") if r.label.startswith("SoftMax"))
    assert sm.path.endswith(".operator") and sm.titles[-1] == "Attention Core"
    assert not analyse(transformer.data).incremental


def test_transformer_attention_reads_later_tokens(transformer):
    """Why no cache (growing or not) can decode it to 1e-12: the softmax runs over every key,
    later ones included, before the triangular weighting renormalises with its 1e-8, so
    appending a token moves the earlier outputs (by about 1e-7 here)."""
    core = transformer.block("Attention Core")
    r7 = interpreter.interpret(core, transformer.bind("tiny", sizes={"x": 7}).env)
    r6 = interpreter.interpret(core, transformer.bind("tiny", sizes={"x": 6}).env)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s) for s in r7.dom_shapes()]
    (y7,) = r7(*xs)
    (y6,) = r6(*[x[:6] for x in xs])
    rel = np.abs(y7[:6] - y6).max() / np.abs(y6).max()
    assert 1e-10 < rel < 1e-5


@pytest.mark.slow
def test_cost_state_per_token_and_layer(bundled, capsys):
    """At released sizes: the window keeps 127 latents of 512 BF16 channels, the n-gram 3
    INT64 ids (numbers from the spec's stated sizes, not from ncdc)."""
    released = bundled.bind("released", sizes={"b": 6}).env
    st = {s.label: s for s in cost(bundled.data).state}
    assert released.subs(st["View win"].bytes_per_token) == 512 * 2
    assert released.subs(st["View ngram"].bytes_per_token) == 8
    assert st["View win"].titles[0] == "Sliding Window Layer"
    assert main(["cost", "--preset", "released", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ds = out["total"]["decoder_state"]
    assert ds["bytes"]["value"] == 512 * 2 * 127 + 8 * 3
    assert ds["per_token_bytes"]["value"] == 512 * 2 + 8
    layers = {lay["layer"]: lay for lay in ds["layers"]}
    assert layers["Sliding Window Layer"]["bytes"]["value"] == 512 * 2 * 127
    assert layers["Engram of Layer 1"]["per_token_bytes"]["value"] == 8
    assert ds["not_incremental"] == []
    assert main(["cost", "--preset", "released"]) == 0
    text = capsys.readouterr().out
    assert "per layer             130 kB, 1.024 kB per token kept: Sliding Window Layer" in text


def test_cost_names_unbounded_reads(transformer, capsys):
    assert main(["cost", str(transformer.source), "--preset", "tiny", "--json"]) == 0
    ds = json.loads(capsys.readouterr().out)["total"]["decoder_state"]
    assert any(r.startswith("SoftMax") and "Attention Core" in r for r in ds["not_incremental"])
