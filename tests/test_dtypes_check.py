"""Generated modules under ``module.to(dtype)``: every dtype runs, the rotary table follows the
dtype, and ``ncdc check --dtype`` compares against the float64 interpreter with per-block
tolerances that still catch a wrong weight."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ncdc
from ncdc import interpreter
from ncdc.codegen import generate, instantiate, load_module
from ncdc.verify.check import ModuleCache, check_morphism
from ncdc.verify.recorded import record_block_inputs
from ncdc.verify.tolerance import UNIT_ROUNDOFF, round_to, tolerance
from tests.conftest import ATTENTION_CORE, TRANSFORMER
from tests.lazy import torch

CACHE = ModuleCache()
NARROW = ("float32", "bfloat16", "float16")


@pytest.fixture(scope="module")
def tiny_env(bundled):
    return bundled.bind("tiny").env


@pytest.fixture(scope="module")
def recorded(bundled, tiny_env):
    return record_block_inputs(interpreter.prefix(bundled.data), tiny_env)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", NARROW)
def test_whole_bundled_model_runs_and_agrees_in_every_dtype(bundled, tiny_env, dtype):
    m = interpreter.prefix(bundled.data)
    r = check_morphism(m, tiny_env, name="whole", dtype=dtype, cache=CACHE)
    assert r.ok, r.problem
    u = UNIT_ROUNDOFF[dtype]
    # the tolerance is derived, not fixed: a few unit roundoffs, far below 1
    assert u < r.tolerance < 1e3 * u
    assert 0 < r.max_rel <= r.tolerance


@pytest.mark.parametrize("path", [TRANSFORMER, ATTENTION_CORE], ids=["transformer",
                                                                      "attention_core"])
@pytest.mark.parametrize("dtype", NARROW)
def test_older_pyncd_examples_in_every_dtype(path, dtype):
    spec = ncdc.load(path)
    env = spec.bind("tiny").env
    r = check_morphism(interpreter.prefix(spec.data), env, dtype=dtype, cache=CACHE)
    assert r.ok, r.problem


def test_sinkhorn_round_needs_the_inputs_its_context_gives(bundled, tiny_env, recorded):
    """A Sinkhorn round divides by row sums; on Gaussian inputs a sum can be near zero and
    float32 is then off by O(1) (the issue's false MISMATCH). Fed what First Sinkhorn Round
    passes it (a positive matrix), it agrees within its float32 tolerance."""
    site = bundled.site("Sinkhorn Round")
    xs = [values for values, _ in recorded[id(site.node)]]
    assert np.all(xs[0] > 0)
    r = check_morphism(site.node, tiny_env, dtype="float32", inputs=xs, cache=CACHE)
    assert r.ok, r.problem
    assert r.max_rel < 1e-6


def _weights(node, env) -> list[str]:
    """Learned weight keys of ``node`` that are not all equal (a zero bias has no spread)."""
    params = interpreter.interpret(node, env).params
    return [k for k, v in params.items() if k.endswith("weight") and np.std(v) > 0]


def _nudged(key, size, one_element=False):
    """``params`` with the weight ``key`` changed by ``size`` of its standard deviation: seeded
    Gaussian noise on every element, or ``+size`` std on its first element only."""
    def nudge(params):
        w = np.array(params[key], dtype=np.float64)
        if one_element:
            w.flat[0] += size * w.std()
        else:
            w += size * w.std() * np.random.default_rng(7).standard_normal(w.shape)
        params[key] = w
        return params

    return nudge


PERTURBED = [
    # (block, dtype, size, one element): bfloat16 keeps 8 bits, so its tolerance is a few
    # percent of the output (4 to 7 u); float32 catches one element moved by 0.05 std
    ("Mixing Coefficients", "float32", 0.01, False),
    ("Mixing Coefficients", "bfloat16", 0.1, False),
    ("Shared Expert", "bfloat16", 0.05, False),
    ("Sliding Window Attention", "bfloat16", 0.05, False),
    ("Mixing Coefficients", "float32", 0.05, True),
    ("Shared Expert", "float32", 0.05, True),
]


@pytest.mark.slow
@pytest.mark.parametrize(("block", "dtype", "size", "one"), PERTURBED)
def test_a_perturbed_weight_is_caught(bundled, tiny_env, recorded, block, dtype, size, one):
    """A weight loaded into the module ``size`` standard deviations off (noise on every
    element, or one element moved) fails the check for every weight of the block, while the
    block itself passes: the tolerance is tight enough to see it."""
    site = bundled.site(block)
    fed = recorded[id(site.node)]
    kw = {"inputs": [values for values, _ in fed], "masks": [live for _, live in fed]}
    ok = check_morphism(site.node, tiny_env, dtype=dtype, cache=CACHE, **kw)
    assert ok.ok, ok.problem
    assert ok.tolerance < (8 if dtype == "bfloat16" else 400) * UNIT_ROUNDOFF[dtype]
    keys = _weights(site.node, tiny_env)
    assert keys
    for key in keys:
        bad = check_morphism(site.node, tiny_env, dtype=dtype, cache=CACHE,
                             module_params=_nudged(key, size, one), **kw)
        assert not bad.ok, f"{key}: a {size} std weight perturbation passed ({bad.max_rel:.2e})"
        assert "relative error" in bad.problem


def test_tolerance_formula():
    assert tolerance("float64", 1.0) == 1e-10
    assert tolerance("bfloat16", 0.0) == pytest.approx(4 * (2.0 ** -8 + 2.0 ** -24))
    assert tolerance("float32", 1e-3) == pytest.approx(4 * (1e-3 + 2.0 ** -24))
    assert tolerance("float32", 0.0, 64) == pytest.approx(4 * 9 * 2.0 ** -24)


def test_round_to_matches_torch_rounding():
    x = np.array([1.0 + 2.0 ** -9, 3.14159, -1e-3])
    got = round_to(x, "bfloat16")
    want = torch.tensor(x).to(torch.bfloat16).double().numpy()
    assert np.array_equal(got, want)
    assert got[0] == 1.0  # ties to even: 1 + 2^-9 rounds down in bfloat16


def _rotary(bundled, tiny_env):
    site = bundled.site("Rotary Embedding")
    g = generate(site.node, tiny_env)
    return site.node, g, load_module(g.source)


def test_rotary_after_double_is_float64_exact(bundled, tiny_env):
    """Built in float32, then ``.double()``: the table is computed in forward, so the angles
    are float64-exact (the issue measured 8.7e-9 with a float32 buffer)."""
    node, g, mod = _rotary(bundled, tiny_env)
    module = instantiate(mod, g.class_name, torch.float32).double()
    run = interpreter.interpret(node, tiny_env)
    xs = interpreter.random_inputs(node, tiny_env, 0)
    want = run(*xs)[0]
    with torch.no_grad():
        got = module(torch.from_numpy(xs[0])).numpy()
    assert np.max(np.abs(got - want)) < 1e-13 * np.max(np.abs(want))


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32"])
def test_rotary_runs_in_every_dtype_and_returns_it(bundled, tiny_env, name):
    dtype = getattr(torch, name)
    node, g, mod = _rotary(bundled, tiny_env)
    module = instantiate(mod, g.class_name, torch.float32).to(dtype)
    xs = interpreter.random_inputs(node, tiny_env, 0)
    x = round_to(xs[0], name)
    want = interpreter.interpret(node, tiny_env)(x)[0]
    with torch.no_grad():
        out = module(torch.from_numpy(x).to(dtype))
    assert out.dtype == dtype
    got = out.double().numpy()
    u = UNIT_ROUNDOFF[str(dtype).removeprefix("torch.")]
    assert np.max(np.abs(got - want)) <= 8 * u * np.max(np.abs(want))
    # complex values held as real parts in float32 at least (codegen/complex_parts.py)
    assert "table_dtype = torch.promote_types(latent.dtype, torch.float32)" in g.source
    assert "register_buffer(\"theta\"" not in g.source


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cli_check_dtype(capsys, dtype):
    from ncdc.cli import main

    rc = main(["check", str(TRANSFORMER), "--dtype", dtype, "--json"])
    out = capsys.readouterr().out
    report = json.loads(out)
    assert rc == 0 and report["ok"]
    assert all(r["tolerance"] > 0 for r in report["results"])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_distinct_block_in_16_bits(bundled, tiny_env, recorded, dtype):
    """What ``ncdc check --dtype float16|bfloat16`` does: every distinct block alone, fed what
    the model gives it, within the tolerance tight enough to catch a perturbed weight (float16:
    the narrowest range, bfloat16: the fewest bits; the CLI runs float32 alike)."""
    from ncdc.codegen.fingerprint import structural_key

    keys: dict = {}
    seen, bad = set(), []
    for site in bundled.blocks():
        key = structural_key(site.node, keys)
        if key in seen:
            continue
        seen.add(key)
        fed = recorded.get(id(site.node))
        kw = {} if fed is None else {"inputs": [v for v, _ in fed],
                                     "masks": [m for _, m in fed]}
        r = check_morphism(site.node, tiny_env, dtype=dtype, cache=CACHE, key=key, **kw)
        if not r.ok:
            bad.append(f"{' / '.join(site.titles)}: {r.problem}")
    assert len(seen) > 80
    assert not bad, bad


def test_rotary_traces_as_one_graph_in_bfloat16(bundled, tiny_env):
    """The dtype decisions are plain comparisons torch.compile(fullgraph=True) can trace."""
    node, g, mod = _rotary(bundled, tiny_env)
    module = instantiate(mod, g.class_name, torch.float32).to(torch.bfloat16)
    x = torch.from_numpy(interpreter.random_inputs(node, tiny_env, 0)[0]).to(torch.bfloat16)
    compiled = torch.compile(module, fullgraph=True, backend="eager")
    with torch.no_grad():
        assert torch.equal(compiled(x), module(x))


def test_recorded_inputs_under_the_pyncd_reading(bundled, tiny_env, recorded):
    """Under ``--reading pyncd`` every block is recorded as under the faithful reading, with
    what the model read that way passes it: Sliding Window Attention receives a LayerNorm
    output (mean 0, variance 1 over the model width: pyncd's LayerNorm, gain 1 and shift 0)
    where the faithful reading gives it an RMSNorm output (mean square 1, mean not 0)."""
    pyncd = record_block_inputs(interpreter.prefix(bundled.data), tiny_env, reading="pyncd")
    assert set(pyncd) == set(recorded)
    site = bundled.site("Sliding Window Attention")
    (x, _), = pyncd[id(site.node)]
    (y, _), = recorded[id(site.node)]
    assert np.max(np.abs(x.mean(-1))) < 1e-12
    assert np.allclose(x.var(-1), 1, atol=1e-3)
    assert np.allclose((y ** 2).mean(-1), 1, atol=1e-3)
    assert np.max(np.abs(y.mean(-1))) > 1e-2
    embedding = bundled.site("Embedding")  # upstream of every norm: the same values
    assert all(np.array_equal(a, b) for (a, _), (b, _) in zip(pyncd[id(embedding.node)],
                                                             recorded[id(embedding.node)], strict=True))


def test_cli_check_dtype_under_the_pyncd_reading(capsys):
    """A Sinkhorn round fed Gaussian rows (near-zero sums) is so ill-conditioned that its
    derived tolerance is near 1 (the check then proves nothing: relative error 0.96 passed);
    fed what the pyncd-read model passes it, it agrees to float32 precision."""
    from ncdc.cli import main

    rc = main(["check", "--block", "Sinkhorn Round", "--reading", "pyncd", "--dtype",
               "float32", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["ok"], report
    (row,) = report["results"]
    assert row["max_rel"] < 1e-6 and row["tolerance"] < 1e-4
