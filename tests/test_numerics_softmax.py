"""``e^x`` followed by an L1 normalisation with no epsilon is evaluated as a stable softmax
(ir/rewrites.softmax_pair) by the interpreter and the generated code: the bundled First Sinkhorn
Round against hand-written numpy, on ordinary logits (literal form) and on logits of +-1e4 in
every dtype (stable form); and the Expert Gate with router logits in the hundreds stays finite."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from ncdc import interpreter
from ncdc.codegen import generate, instantiate, load_module
from ncdc.ir.operators import Arithmetic, L1Norm, SoftMax
from ncdc.ir.pipeline import normalize
from ncdc.ir.rewrites import softmax_pair
from ncdc.verify.check import ModuleCache, check_morphism
from ncdc.verify.tolerance import UNIT_ROUNDOFF, round_to
from tests.lazy import torch

CACHE = ModuleCache()


@pytest.fixture(scope="module")
def env(bundled):
    return bundled.bind("tiny").env


@pytest.fixture(scope="module")
def first_round(bundled):
    return bundled.block("First Sinkhorn Round")


def _eps(env, block):
    (sym,) = [s for s in env.values if s.label == "\\varepsilon_{hc}"]
    return float(env.values[sym])


def _literal(x, eps):
    """The block as its description reads: e^x, rows divided by their sums, + eps, columns
    divided by their sums + eps."""
    e = np.exp(x)
    p = e / e.sum(-1, keepdims=True) + eps
    return p / (p.sum(-2, keepdims=True) + eps)


def _stable(x, eps):
    e = np.exp(x - x.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True) + eps
    return p / (p.sum(-2, keepdims=True) + eps)


def test_the_pair_is_found_in_the_first_sinkhorn_round(first_round):
    items = first_round.body.content
    pairs = [softmax_pair(a, b) for a, b in itertools.pairwise(items)]
    found = [p for p in pairs if p]
    assert len(found) == 1
    logits, soft = found[0]
    assert isinstance(soft.operator, SoftMax) and isinstance(logits.operator, Arithmetic)
    assert isinstance(items[1].operator, L1Norm)  # the spec itself is untouched
    normal = normalize(first_round).body.content  # the pipeline's softmax pass
    assert not any(softmax_pair(a, b) for a, b in itertools.pairwise(normal))
    assert [type(b.operator) for b in normal] == [type(b.operator) for b in (
        items[0], soft, *items[2:])]


def test_interpreter_matches_the_literal_form_on_ordinary_logits(first_round, env):
    x = np.random.default_rng(1).standard_normal((4, 4)) * 3
    got = interpreter.interpret(first_round, env)(x)[0]
    assert np.allclose(got, _literal(x, _eps(env, first_round)), rtol=1e-14, atol=0)


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
def test_extreme_logits_are_finite_and_right_in_every_dtype(first_round, env, dtype):
    rng = np.random.default_rng(2)
    x = rng.choice([-1e4, -50.0, 0.0, 30.0, 1e4], size=(4, 4))
    x = round_to(x, dtype)
    want = _stable(x, _eps(env, first_round))
    assert np.all(np.isfinite(want))
    with np.errstate(all="ignore"):
        assert not np.all(np.isfinite(_literal(x, _eps(env, first_round))))
    ref = interpreter.interpret(first_round, env)(x)[0]
    assert np.allclose(ref, want, rtol=1e-14, atol=1e-300)
    g = generate(first_round, env, runtime={"loader"})
    td = getattr(torch, dtype)
    module = instantiate(load_module(g.source), g.class_name, td)
    with torch.no_grad():
        out = module(torch.from_numpy(x).to(td))
    got = out.double().numpy()
    assert np.all(np.isfinite(got))
    assert np.max(np.abs(got - want)) <= 16 * UNIT_ROUNDOFF[dtype] * np.max(np.abs(want))


@pytest.mark.parametrize("plain", [False, True])
def test_the_plan_and_the_plain_plan_both_take_the_stable_form(first_round, env, plain):
    x = np.random.default_rng(3).choice([-1e4, -50.0, 0.0, 30.0, 1e4], size=(4, 4))
    want = _stable(x, _eps(env, first_round))
    hooks = {"on_entry": lambda *_: None} if plain else {}
    got = interpreter.interpret(first_round, env).evaluate(x, **hooks).outputs[0].values
    assert np.allclose(got, want, rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_expert_gate_with_large_router_logits(bundled, env, dtype):
    """The issue's NaN: a router logit of 100 in float32 (softplus as sqrt(log(e^x + 1)))."""
    gate = bundled.block("Expert Gate")
    x = interpreter.random_inputs(gate, env, 0)[0] * 300.0
    r = check_morphism(gate, env, dtype=dtype, inputs=[x], cache=CACHE)
    assert r.ok, r.problem
    g, module = CACHE.get(gate, env, "exact", dtype)
    run = interpreter.interpret(gate, env, stand_in=True)
    g.load_params(module, run.params)
    with torch.no_grad():
        outs = module(torch.from_numpy(round_to(x, dtype)).to(getattr(torch, dtype)))
    outs = outs if isinstance(outs, tuple) else (outs,)
    assert all(torch.isfinite(o.double()).all() for o in outs if o.is_floating_point())
    seen = {}

    def on_entry(blk, titles, ins, batch):
        if "s^{+}" in blk.title:
            seen["logits"] = np.asarray(ins[0].values)

    run.evaluate(x, on_entry=on_entry)
    assert seen["logits"].max() > 100  # e^x overflows float32 there
