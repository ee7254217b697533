"""Generated ``prefill``/``step`` against the interpreter's whole-sequence outputs: every block of
the bundled spec with a token axis, prefill sizes and step chunks drawn by hypothesis, float64
within 1e-12 and emulate mode bit for bit; a damaged state is caught; the state stays bounded."""
from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ncdc.cli import main
from ncdc.codegen.decoder import token_input
from ncdc.codegen.fingerprint import structural_key
from ncdc.naming import named_blocks
from ncdc.verify.decoder_check import TOLERANCE, decode_and_compare, prepare
from tests.conftest import loaded
from tests.lazy import torch

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def _spec():
    return loaded()


@functools.cache
def _env():
    return _spec().bind("tiny").env


def _token_blocks() -> list[str]:
    """Labels of the distinct blocks with a token axis in their inputs (as ``ncdc check``)."""
    spec, seen, out = _spec(), set(), []
    cache: dict = {}
    for b in named_blocks(spec.data):
        key = structural_key(b.site.node, cache)
        if key in seen or token_input(b.site.node) is None:
            continue
        seen.add(key)
        out.append(b.label)
    return out


BLOCKS = _token_blocks()
SWA = "Sliding Window Layer / Single-Pass mHC / Sliding Window Attention"


@functools.cache
def _prepared(label: str, quant: str = "exact"):
    node = _spec().model() if label == "(model)" else _spec().site(label).node
    return prepare(node, _env(), quant=quant)


def _ok(res):
    assert res.ok, f"{res.name}: {res.problem} (prefill {res.prefill}, steps {res.chunks})"
    assert res.max_rel <= TOLERANCE


def test_blocks_cover_the_token_reads():
    assert {"Sliding Window Layer", "Engram of Layer 1"} <= set(BLOCKS)
    assert any(b.endswith("Sliding Window Attention") for b in BLOCKS)
    assert any(b.endswith("Rotary Embedding") for b in BLOCKS)


@pytest.mark.slow
@pytest.mark.parametrize("label", BLOCKS)
@settings(SETTINGS, max_examples=3)
@given(prefill=st.integers(1, 12), chunks=st.lists(st.integers(1, 5), min_size=1, max_size=3))
def test_every_token_block_decodes(label, prefill, chunks):
    _ok(decode_and_compare(_prepared(label), prefill, chunks, name=label))


@pytest.mark.slow
@settings(SETTINGS, max_examples=6)
@given(label=st.sampled_from([SWA, "Engram of Layer 1"]),
       prefill=st.integers(1, 12), chunks=st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_emulate_decodes_bit_for_bit(label, prefill, chunks):
    res = decode_and_compare(_prepared(label, "emulate"), prefill, chunks, name=label)
    _ok(res)
    assert res.max_abs == 0.0


@pytest.mark.slow
@pytest.mark.parametrize(("prefill", "chunks"), [(1, (1,)), (9, (3,))])
def test_whole_model_one_token_at_a_time(prefill, chunks):
    """The salvaged model (Embedding, tape, layer 1 with its window, Engram reading the token
    ids): one token per step from the first token, and a prefill past the window."""
    res = decode_and_compare(_prepared("(model)"), prefill, chunks)
    _ok(res)
    w = _env().size(next(s for s in _spec().symbols.values() if s.label == "w"))
    win = [k for k in res.state_entries if k.endswith(".win")]
    assert len(win) == 1 and res.state_entries[win[0]][0] == w - 1
    ngram = [k for k in res.state_entries if k.endswith(".ngram")]
    assert sorted(res.state_entries) == sorted(["tokens", win[0], *ngram]) and len(ngram) == 1
    assert res.state_entries[ngram[0]] == (_env().size(
        next(s for s in _spec().symbols.values() if s.label == "L")) - 1,)


@pytest.mark.parametrize("damage", ["position", "window", "ngram"])
def test_a_damaged_state_is_caught(damage):
    """The check fails when the state is wrong: the position counter, the window's latents,
    the n-gram's earlier token ids (and passes with the state left alone)."""
    def edit(state):
        if damage == "position":
            state["tokens"] = state["tokens"] + 1
        else:
            key = next(k for k in state if k.endswith("win" if damage == "window" else "ngram"))
            state[key] = torch.zeros_like(state[key]) + (7 if damage == "ngram" else 0)
        return state

    block = "Engram of Layer 1" if damage == "ngram" else SWA
    res = decode_and_compare(_prepared(block), 4, (1, 2), edit_state=edit)
    assert decode_and_compare(_prepared(block), 4, (1, 2)).ok
    assert not res.ok and res.problem


@pytest.mark.slow
def test_state_is_bounded():
    """From the prefill on, through many steps past the window, the window entry holds
    exactly its look-back (dead entries before the first tokens), never more."""
    prep = _prepared(SWA)
    x = torch.randn(40, prep.module.w_qa.in_features, dtype=torch.float64)
    with torch.no_grad():
        _, state = prep.module.prefill(x[:2])
        sizes = []
        for t in range(2, 40):
            _, state = prep.module.step(x[t:t + 1], state=state)
            sizes.append(tuple(state["win"].shape))
    w = prep.module.config.window_size
    assert len(sizes) == 38 and set(sizes) == {(w - 1, x.shape[1])}  # fixed from the start
    assert int(state["tokens"]) == 40


@pytest.mark.slow
def test_cli_incremental(capsys):
    assert main(["check", "--incremental", "--block", "Engram of Layer 1", "--prefill", "2",
                 "--chunks", "1,3", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    (r,) = out["results"]
    assert r["ok"] and r["state"]["ngram"] == [3] and r["steps"][:2] == [1, 3]


def test_cli_incremental_names_the_unbounded_read(transformer, capsys):
    code = main(["check", str(transformer.source), "--incremental", "--block",
                 "Attention Core"])
    text = capsys.readouterr().out
    assert code == 1 and "not incremental" in text and "SoftMax" in text


def test_state_keys_follow_the_module_tree():
    """A read's state key is its module's path at the call: the same after a step (the path
    found once is reused) and the new path once the module is moved inside a wrapper."""
    layer = _prepared("Sliding Window Layer").module
    n, m = layer.config.streams, layer.config.hidden_width
    gen = torch.Generator().manual_seed(0)
    xs = [torch.rand(3, n, generator=gen, dtype=torch.float64) + 0.5,
          torch.randn(3, n, m, generator=gen, dtype=torch.float64)]
    with torch.no_grad():
        _, state = layer.prefill(*[x[:2] for x in xs])
        assert {k for k in state if k != "tokens"} == {"single_pass_mhc.body.win"}
        out, again = layer.step(*[x[2:] for x in xs], state=state)
        assert set(again) == set(state)
        body = layer.single_pass_mhc.body
        wrapper = torch.nn.Module()
        wrapper.inner = body
        wrapper.forward = body.forward
        layer.single_pass_mhc.body = wrapper
        try:
            _, moved = layer.step(*[x[2:] for x in xs], state=state)
        finally:
            layer.single_pass_mhc.body = body
    assert "single_pass_mhc.body.inner.win" in moved


def test_a_step_without_gradients_runs_in_inference_mode_and_returns_ordinary_tensors():
    """Without gradients the forward inside ``step`` runs in ``torch.inference_mode`` (seen by a
    forward hook), yet its outputs and state are ordinary tensors: a later step with gradients
    continues that state, and its gradient reaches the input. With gradients it does not."""
    layer = _prepared("Sliding Window Layer").module
    n, m = layer.config.streams, layer.config.hidden_width
    gen = torch.Generator().manual_seed(1)
    xs = [torch.rand(4, n, generator=gen, dtype=torch.float64) + 0.5,
          torch.randn(4, n, m, generator=gen, dtype=torch.float64)]
    seen = []
    hook = layer.single_pass_mhc.register_forward_hook(
        lambda *_: seen.append(torch.is_inference_mode_enabled()))
    try:
        with torch.no_grad():
            out, state = layer.prefill(*[x[:3] for x in xs])
            eager, _ = layer.step(*[x[3:] for x in xs], state=state)
        assert seen == [True, True]
        for t in (*out, *eager, *state.values()):
            assert not t.is_inference()
        x = xs[1][3:].clone().requires_grad_()
        got, again = layer.step(xs[0][3:], x, state=state)
        assert seen == [True, True, False]
    finally:
        hook.remove()
    assert set(again) == set(state)
    torch.testing.assert_close(got[1].detach(), eager[1], rtol=0, atol=0)
    got[1].sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
