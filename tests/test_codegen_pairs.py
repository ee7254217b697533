"""Arrays on a data-dependent sparse axis computed at the live pairs only (codegen/pairs.py): the
routed experts run on their routed tokens alone, agree with the interpreter (which evaluates them
densely) in both modes, never read an unselected expert, and fall back to the dense form when a
pairs array would leave the gated contraction."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from ncdc import codegen, interpreter
from ncdc.codegen.generator import Generator
from ncdc.ir.morphisms import Composed, Rearrangement
from ncdc.verify.check import CheckResult, check_morphism, compare, run_generated
from tests.lazy import FlopCounterMode, torch

TOKENS = 24


def _prelude():
    """codegen/prelude/pairs.py as a module (it is pasted verbatim into generated files)."""
    path = importlib.util.find_spec("ncdc.codegen").submodule_search_locations[0] + "/prelude/pairs.py"
    spec = importlib.util.spec_from_file_location("pairs_prelude", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_prelude_helpers_against_loops():
    """Every helper against a plain loop over (row, slot) positions."""
    p = _prelude()
    gen = torch.Generator().manual_seed(0)
    lead, n, f, o = (2, 3), 5, 4, 3
    live = torch.rand(*lead, n, generator=gen) < 0.4
    live[0, 0] = False  # a row without pairs
    rows, slots, counts = p.live_pairs(live, lead)
    flat = live.reshape(-1, n).numpy()
    want = [(r, s) for s in range(n) for r in range(flat.shape[0]) if flat[r, s]]
    assert list(zip(rows.tolist(), slots.tolist(), strict=True)) == want
    assert counts == [int(flat[:, s].sum()) for s in range(n)]
    pairs = (rows, slots, counts)
    x = torch.randn(*lead, f, generator=gen, dtype=torch.float64)
    xf = x.reshape(-1, f).numpy()
    assert np.array_equal(p.take_rows(x, 1, lead, pairs).numpy(), xf[rows.numpy()])
    y = torch.randn(*lead, n, f, generator=gen, dtype=torch.float64)
    yf = y.reshape(-1, n, f).numpy()
    assert np.array_equal(p.take_pairs(y, 2, lead, pairs).numpy(),
                          np.stack([yf[r, s] for r, s in want]))
    w = torch.randn(f, n, o, generator=gen, dtype=torch.float64)
    got = p.pairwise_matmul(p.take_rows(x, 1, lead, pairs), w, 1, pairs).numpy()
    np.testing.assert_allclose(got, np.stack([xf[r] @ w.numpy()[:, s] for r, s in want]),
                               rtol=1e-13)
    v = torch.randn(len(want), o, generator=gen, dtype=torch.float64)
    summed = np.zeros((flat.shape[0], o))
    dense = np.zeros((flat.shape[0], n, o))
    for i, (r, s) in enumerate(want):
        summed[r] += v[i].numpy()
        dense[r, s] = v[i].numpy()
    np.testing.assert_allclose(p.add_rows(v, lead, pairs).numpy(), summed.reshape(*lead, o),
                               rtol=1e-13)
    assert np.array_equal(p.pairs_to_dense(v, lead, n, pairs).numpy(),
                          dense.reshape(*lead, n, o))
    every = p.live_pairs(torch.ones(n, dtype=torch.bool), lead, n)  # every pair, as generated
    assert every[2] == [6] * n and np.array_equal(
        p.pairs_to_dense(torch.ones(6 * n, 1), lead, n, every).numpy(), np.ones((*lead, n, 1)))
    empty = p.live_pairs(torch.zeros(*lead, n, dtype=torch.bool), lead)
    assert p.pairwise_matmul(torch.zeros(0, f), w.float(), 1, empty).shape == (0, o)


def _moe(bundled, sizes):
    return bundled.block("Mixture of Experts"), bundled.bind("tiny", sizes=sizes).env


def _instance(morphism, env, quant="exact", dtype="float64"):
    g = codegen.generate(morphism, env, quant=quant, runtime={"loader"})
    kwargs = {"quant": quant} if g.root.needs_quant else {}
    return g, codegen.instantiate(codegen.load_module(g.source), g.class_name,
                                  codegen.DTYPES[dtype], **kwargs)


def test_medium_moe_multiplies_only_the_routed_experts(bundled):
    """At medium sizes the generated mixture does the matrix products of the k routed experts
    of each token, not of all e: the counted FLOPs against the dense count."""
    moe = bundled.block("Mixture of Experts")
    env = bundled.bind("medium").env
    g, module = _instance(moe, env, dtype="float32")
    routed_class = g.source[g.source.index("class RoutedExperts"):
                            g.source.index("class SharedExpert")]
    assert "pairwise_matmul(hidden_rows, self.w_g, 1, k_e_pairs)" in routed_class
    assert "tensordot" not in routed_class and "einsum" not in routed_class
    m, e, f = module.routed_experts.w_g.shape
    k = env.size(moe.body.content[1].content[0].content[0].cod[0].shape[0].activity)
    assert (m, e, k, f) == (512, 32, 4, 128)
    x = torch.randn(TOKENS, m)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(x)
    routed = 2 * TOKENS * k * 3 * m * f
    rest = 2 * TOKENS * (m * e + 3 * m * f + k * m)  # router, shared expert, gates x outputs
    dense = 2 * TOKENS * e * 3 * m * f
    assert routed <= counter.get_total_flops() <= routed + rest < dense / 4


def _routed_params(run, e):
    """The interpreter's parameters with routing pinned to experts 0-5 (of ``e``): a large
    bias there, a very negative one elsewhere."""
    params = {key: np.array(v, copy=True) for key, v in run.params.items()}
    bias = np.full(e, -1e3)
    bias[:6] = 4.0
    params["Mixture of Experts/Expert Gate/bias.weight"] = bias
    return params


def _poisoned(params):
    """The idle experts' weights (6 on) NaN: reading or multiplying one of them (instead of
    selecting the routed ones) would show in the output."""
    out = dict(params)
    for name in ("W^{G}", "W^{U}", "W^{D}"):
        key = f"Mixture of Experts/Routed Experts/{name}.weight"
        out[key] = np.array(params[key], copy=True)
        out[key][:, 6:] = np.nan
    return out


@pytest.mark.parametrize("quant", ["exact", "emulate"])
def test_moe_agrees_with_the_interpreter_on_shared_and_idle_experts(bundled, quant):
    """24 tokens route 4 of 16 experts each among experts 0-5 (so every routed expert serves
    several tokens, and ten experts none): the batched generated module equals the
    interpreter token by token, bit for bit in emulate mode; and it never reads an idle
    expert (NaN weights there change nothing)."""
    moe, env = _moe(bundled, {"e": 16, "k": 4})
    base = interpreter.interpret(moe, env, quant=quant, stand_in=True, seed=0)
    params = _routed_params(base, 16)
    run = interpreter.interpret(moe, env, quant=quant, params=params)
    tokens = [interpreter.random_inputs(moe, env, s)[0] for s in range(TOKENS)]
    refs = [run.evaluate(t).outputs[0] for t in tokens]
    gate = bundled.block("Expert Gate")
    gate_run = interpreter.interpret(gate, env, quant=quant, params={
        key.removeprefix("Mixture of Experts/"): v for key, v in params.items()
        if "/Expert Gate/" in key})
    chosen = np.stack([gate_run.evaluate(t).outputs[0].live for t in tokens])
    per_expert = chosen.sum(axis=0)
    assert (per_expert[:6] >= 2).all() and (per_expert[6:] == 0).all()
    g, module = _instance(moe, env, quant)
    g.load_params(module, params)
    ((got, live),) = run_generated(g, module, [np.stack(tokens)], {}, "float64")
    assert live is None
    for i, ref in enumerate(refs):
        res = CheckResult("moe", "", "")
        compare([ref], [(got[i], None)], quant, "float64", res, moe.cod)
        assert res.ok, f"token {i}: {res.problem}"
    g.load_params(module, _poisoned(params))
    ((again, _),) = run_generated(g, module, [np.stack(tokens)], {}, "float64")
    assert torch.equal(again, got)


def test_routed_experts_called_without_pairs_is_dense(bundled):
    """The pairs-mode class, called without pairs, computes every pair and returns the dense
    layout: equal to the interpreter's (dense) Routed Experts."""
    moe, env = _moe(bundled, {"e": 8, "k": 2})
    g, module = _instance(moe, env)
    block = bundled.block("Routed Experts")
    run = interpreter.interpret(block, env, stand_in=True)
    state = module.state_dict()
    with torch.no_grad():
        for name, key in g.param_keys.items():
            if name.startswith("routed_experts."):
                state[name].copy_(torch.from_numpy(
                    run.params[key.removeprefix("Mixture of Experts/")]))
    tokens = np.stack([interpreter.random_inputs(block, env, s)[0] for s in range(3)])
    with torch.no_grad():
        got = module.routed_experts(torch.from_numpy(tokens))
    assert got.shape == (3,) + tuple(env.sizes(block.cod[0].shape))
    for i, x in enumerate(tokens):
        np.testing.assert_allclose(got[i].numpy(), run.evaluate(x).outputs[0].values,
                                   rtol=1e-12, atol=1e-14)


def test_pairs_array_that_leaves_the_contraction_stays_dense(bundled, monkeypatch):
    """The gate and the routed experts' output both returned: the experts' array leaves the
    gated contraction, so the call is generated dense (after a first attempt in pairs form)
    and still agrees with the interpreter."""
    moe = bundled.block("Mixture of Experts")
    env = bundled.bind("tiny").env
    gated = moe.body.content[1].content[0].content[0]  # (Gate, Routed Experts then Cast)
    assert [str(a.shape[0]) for a in gated.cod] == ["k/e", "k/e"]
    both = Composed((Rearrangement((0, 0), moe.dom), gated))
    attempts = []
    build_class = Generator.build_class

    def spy(self, make):
        return build_class(self, lambda excluded: attempts.append(excluded) or make(excluded))

    monkeypatch.setattr(Generator, "build_class", spy)
    source = codegen.generate_source(both, env)
    assert any(attempts) and "live_pairs" not in source and "pairwise_matmul" not in source
    for quant in ("exact", "emulate"):
        r = check_morphism(both, env, name="gate and experts", quant=quant, seeds=2)
        assert r.ok, r.problem


def test_pairs_path_is_differentiable(bundled):
    """Exact mode: gradcheck through the gathered rows, the per-expert products and the
    scatter-sum, w.r.t. every parameter and a batch of tokens."""
    from torch.func import functional_call

    moe, env = _moe(bundled, {"e": 8, "k": 2, "m": 32, "f": 32})
    _, module = _instance(moe, env)
    gen = torch.Generator().manual_seed(0)
    params = {name: (torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.5
                     ).requires_grad_(True) for name, p in module.named_parameters()}
    x = torch.randn(5, 32, generator=gen, dtype=torch.float64, requires_grad=True)
    names = list(params)

    def f(*args):
        return functional_call(module, dict(zip(names, args[:len(names)], strict=True)), args[len(names):])

    assert torch.autograd.gradcheck(f, (*params.values(), x), eps=1e-6, atol=1e-6, rtol=1e-5,
                                    fast_mode=True)
