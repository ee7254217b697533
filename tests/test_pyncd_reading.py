"""The ``pyncd`` compatibility reading on transformer.json's pieces, against hand-written numpy
(and torch's own LayerNorm): Elementwise is ReLU, Normalize is LayerNorm with gain and shift
parameters (initialised 1 and 0); the faithful reading keeps sigmoid and RMSNorm."""
from __future__ import annotations

import numpy as np
import pytest

import ncdc
from ncdc.cli import main
from ncdc.codegen import compile_torch, load_interpreter_params
from ncdc.ir.readings import apply_reading
from tests.conftest import TRANSFORMER
from tests.lazy import torch

SECOND_ADD_NORM = "data.content[1].body.content[1]"  # x -> Norm(x + FeedForward(x))


@pytest.fixture(scope="module")
def spec():
    return ncdc.load(TRANSFORMER)


@pytest.fixture(scope="module")
def env(spec):
    return spec.bind("tiny", sizes={"m": 6, "d_{ff}": 5, "x": 4}).env


def _params(run, seed=0):
    rng = np.random.default_rng(seed)
    return {p.key: rng.standard_normal(tuple(run.env.size(s) for s in p.shape)) for p in run.param_specs}


def _key(params, suffix):
    (key,) = [k for k in params if k.endswith(suffix)]
    return key


def _torch_out(block, env, reading, params, x):
    _, module = compile_torch(block, env=env, reading=reading)
    load_interpreter_params(module, params)
    return module(torch.as_tensor(x)).detach().numpy()


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


@pytest.mark.parametrize("reading", ["faithful", "pyncd"])
def test_feed_forward(spec, env, reading):
    block = spec.block("Feed Forward")
    run = ncdc.interpret(block, env=env, reading=reading)
    params = _params(run)
    w_in, w_out = params[_key(params, "L_{in}.weight")], params[_key(params, "L_{out}.weight")]
    x = np.random.default_rng(1).standard_normal((4, 6))
    act = np.maximum(x @ w_in, 0) if reading == "pyncd" else _sigmoid(x @ w_in)
    want = act @ w_out
    run = ncdc.interpret(block, env=env, params=params, reading=reading)
    np.testing.assert_allclose(run(x)[0], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_torch_out(block, env, reading, params, x), want, rtol=1e-10,
                               atol=1e-12)


def test_the_pyncd_normalize_is_layer_norm_with_parameters(spec, env):
    block = spec.block(SECOND_ADD_NORM)
    faithful = ncdc.interpret(block, env=env)
    assert not any(p.key.endswith((".gain", ".shift")) for p in faithful.param_specs)
    run = ncdc.interpret(block, env=env, reading="pyncd")
    keys = {p.key: p for p in run.param_specs}
    gain, shift = _key(keys, ".gain"), _key(keys, ".shift")
    assert tuple(run.env.size(s) for s in keys[gain].shape) == (6,)
    params = _params(run, seed=2)
    x = np.random.default_rng(3).standard_normal((4, 6))
    w_in, w_out = params[_key(params, "L_{in}.weight")], params[_key(params, "L_{out}.weight")]
    z = x + np.maximum(x @ w_in, 0) @ w_out
    mu = z.mean(axis=-1, keepdims=True)
    var = ((z - mu) ** 2).mean(axis=-1, keepdims=True)
    want = (z - mu) / np.sqrt(var + 1e-5) * params[gain] + params[shift]
    reference = torch.nn.functional.layer_norm(
        torch.as_tensor(z), (6,), torch.as_tensor(params[gain]), torch.as_tensor(params[shift]),
        eps=1e-5).numpy()
    np.testing.assert_allclose(want, reference, rtol=1e-12, atol=1e-12)
    got = ncdc.interpret(block, env=env, params=params, reading="pyncd")(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_torch_out(block, env, "pyncd", params, x), want, rtol=1e-10,
                               atol=1e-12)


def test_layer_norm_parameters_start_at_one_and_zero(spec, env):
    block = spec.block(SECOND_ADD_NORM)
    _, module = compile_torch(block, env=env, reading="pyncd")
    state = module.state_dict()
    weights = [v for k, v in state.items() if k.endswith("layer_norm_weight")]
    biases = [v for k, v in state.items() if k.endswith("layer_norm_bias")]
    assert weights and biases
    assert all(torch.equal(w, torch.ones_like(w)) for w in weights)
    assert all(torch.equal(b, torch.zeros_like(b)) for b in biases)


def test_faithful_normalize_is_rms_norm(spec, env):
    block = spec.block(SECOND_ADD_NORM)
    run = ncdc.interpret(block, env=env)
    params = _params(run, seed=4)
    x = np.random.default_rng(5).standard_normal((4, 6))
    w_in, w_out = params[_key(params, "L_{in}.weight")], params[_key(params, "L_{out}.weight")]
    z = x + _sigmoid(x @ w_in) @ w_out
    want = z / np.sqrt((z * z).mean(axis=-1, keepdims=True) + 1e-5)
    got = ncdc.interpret(block, env=env, params=params)(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_apply_reading(spec):
    once = apply_reading(spec.data, "pyncd")
    assert apply_reading(spec.data, "faithful") is spec.data
    layer = once.content[1].body
    assert layer is not spec.data.content[1].body  # rewritten
    again = apply_reading(spec.data, "pyncd")
    assert type(again) is type(once)
    with pytest.raises(ValueError):
        apply_reading(spec.data, "tsncd")


@pytest.mark.parametrize("command", [["check"], ["eval"], ["compile", "-o", "{tmp}/m.py"]])
def test_cli_reading_flag(command, tmp_path, capsys):
    argv = [c.format(tmp=tmp_path) for c in command] + [str(TRANSFORMER), "--reading", "pyncd"]
    assert main(argv) == 0
    if command[0] == "compile":
        source = (tmp_path / "m.py").read_text(encoding="utf-8")
        assert "torch.relu" in source and "layer_norm_weight" in source
        assert "torch.sigmoid" not in source


def test_the_reading_reaches_into_a_salvaged_spec(bundled):
    from ncdc.ir.morphisms import Broadcasted
    from ncdc.ir.operators import Normalize
    from ncdc.ir.walk import walk

    def norms(root):
        return [s.node.operator for s in walk(root) if isinstance(s.node, Broadcasted)
                and isinstance(s.node.operator, Normalize)]

    rewritten = apply_reading(bundled.data, "pyncd")
    before, after = norms(bundled.data), norms(rewritten)
    assert len(after) == len(before) > 0
    assert all(op.centred and op.gain and op.bias for op in after)
    assert not any(op.centred for op in before)


def test_a_shared_term_stays_shared(spec):
    from ncdc.ir.morphisms import Composed

    norm = spec.block(SECOND_ADD_NORM).body.content[3]
    twice = Composed((norm, norm), path="data")
    out = apply_reading(twice, "pyncd")
    assert out.content[0] is out.content[1] and out.content[0] is not norm
    assert out.content[0].operator.centred and not norm.operator.centred
