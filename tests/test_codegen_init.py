"""Initialisation of generated modules: ``reset_parameters`` on every class, meta-device
construction (``to_empty`` + ``reset_parameters``) equal to eager construction, the Engram primes
computed exactly, and user data refused until loaded or stood in for."""
from __future__ import annotations

import ast
import time
import warnings

import numpy as np
import pytest
import sympy

from ncdc import interpreter
from ncdc.codegen import generate, load_module
from tests.lazy import torch


@pytest.fixture(scope="module")
def prefix(bundled):
    env = bundled.bind("tiny").env
    m = interpreter.prefix(bundled.data)
    g = generate(m, env)
    return m, env, g, load_module(g.source)


def _post_order(module):
    """Modules in the order eager construction initialises them (children first)."""
    for child in module.children():
        yield from _post_order(child)
    yield module


def _state(module):
    return {k: v.detach().clone() for k, v in
            list(module.state_dict().items())
            + [(f"{n}#buffer", b) for n, b in module.named_buffers()]}


@pytest.mark.slow
def test_every_class_has_reset_parameters(prefix):
    _, _, g, _ = prefix
    tree = ast.parse(g.source)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name != g.config_name]
    assert len(classes) > 10
    having = set()  # classes defining reset_parameters or inheriting it from one that does
    for cls in classes:  # bases come first in the file
        methods = {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
        bases = {ast.unparse(b) for b in cls.bases}
        assert "reset_parameters" in methods or bases & having, cls.name
        having.add(cls.name)


def test_meta_then_reset_equals_eager_by_seed(prefix):
    _, _, g, mod = prefix
    cls = getattr(mod, g.class_name)
    torch.manual_seed(7)
    eager = cls(stand_in="load")
    with torch.device("meta"):
        lazy = cls(stand_in="load")
    assert all(p.is_meta for p in lazy.parameters())
    lazy = lazy.to_empty(device="cpu")
    torch.manual_seed(7)
    for m in _post_order(lazy):
        if hasattr(m, "reset_parameters"):  # containers (ModuleList) have none
            m.reset_parameters()
    want, got = _state(eager), _state(lazy)
    assert want.keys() == got.keys()
    for k in want:
        assert torch.equal(want[k], got[k]), k


def test_init_weights_after_meta_equals_eager_by_seed(prefix):
    """The recipe: build on the meta device, ``to_empty``, then the root's one recursive
    ``init_weights()``: every tensor equals eager construction's for the same seed."""
    _, _, g, mod = prefix
    cls = getattr(mod, g.class_name)
    torch.manual_seed(11)
    eager = cls(stand_in="load")
    with torch.device("meta"):
        lazy = cls(stand_in="load")
    lazy.to_empty(device="cpu")

    def garbage():
        with torch.no_grad():
            for t in lazy.state_dict().values():
                t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-1)

    garbage()
    torch.manual_seed(11)
    lazy.reset_parameters()  # the root's own: its submodules keep the garbage
    assert any(torch.isnan(t).any() for t in lazy.state_dict().values()
               if t.is_floating_point())
    garbage()
    torch.manual_seed(11)
    lazy.init_weights()
    want, got = _state(eager), _state(lazy)
    assert want.keys() == got.keys() and len(want) > 30
    for k in want:
        assert torch.equal(want[k], got[k]), k


def test_reset_distribution_matches_the_init_rule(prefix):
    """Pre-order resets (as FSDP-style init loops do) give each array the rule's distribution:
    weights normal with std 1/sqrt(fan-in) (fan-in from the interpreter's parameter specs),
    biases and shifts 0, gains 1, tables std 1; computed buffers exact."""
    m, env, g, mod = prefix
    with torch.device("meta"):
        module = getattr(mod, g.class_name)(stand_in="load")
    module = module.to_empty(device="cpu").double()
    torch.manual_seed(3)
    for sub in module.modules():
        if hasattr(sub, "reset_parameters"):
            sub.reset_parameters()
    specs = {s.key: s for s in interpreter.interpret(m, env, stand_in=True).param_specs}
    state = module.state_dict()
    checked = 0
    for name, key in g.param_keys.items():
        spec, value = specs[key], state[name].numpy()
        if spec.role == "weight" and spec.site.input_weaves:
            fan = int(np.prod([np.prod(env.sizes(w.target)) for w in spec.site.input_weaves]))
            std = value.std()
            n = value.size
            assert abs(std - fan ** -0.5) < 6 * fan ** -0.5 / np.sqrt(2 * n), (name, std, fan)
            assert abs(value.mean()) < 6 * fan ** -0.5 / np.sqrt(n), name
            checked += 1
        elif spec.role in ("bias", "shift"):
            assert not value.any(), name
        elif spec.role == "gain":
            assert (value == 1).all(), name
    assert checked > 10


def test_primes_computed_exactly(prefix):
    m, env, g, mod = prefix
    module = getattr(mod, g.class_name)(stand_in="load")
    run = interpreter.interpret(m, env, stand_in=True)
    keys = [(n, k) for n, k in g.param_keys.items() if k.endswith("p_{1}.value")]
    assert keys
    for name, key in keys:
        got = module.state_dict()[name].numpy()
        assert np.array_equal(got, run.params[key])
        assert all(sympy.isprime(int(p)) for p in got)
        assert int(got.sum()) == env.size(next(s for s in env.values if s.label == "T_{1}"))


def test_released_prime_rule():
    from ncdc.codegen.prelude.fixed import consecutive_primes

    want = []
    p = 16_000_000
    for _ in range(24):
        p = sympy.nextprime(p)
        want.append(p)
    assert sum(want) == 384_006_168
    assert consecutive_primes(24, 384_006_168, 2 ** 40).tolist() == want
    with pytest.raises(ValueError):
        consecutive_primes(24, 384_006_169, 2 ** 40)
    with pytest.raises(ValueError):
        consecutive_primes(24, 384_006_168, 16_000_100)


def test_user_data_refused_until_loaded_or_stood_in(bundled):
    env = bundled.bind("tiny").env
    block = bundled.block("data.content[3].content[1].body.operator.block.body.content[1]"
                          ".content[1].content[0].content[1].content[0].body.body.operator.block")
    g = generate(block, env, runtime={"loader"})
    mod = load_module(g.source)
    cls = getattr(mod, g.class_name)
    x = torch.from_numpy(interpreter.random_inputs(block, env, 0)[0])
    with pytest.raises(ValueError, match=r"E_\{cmp\}.*stand_in='load'.*stand_in=True"):
        cls()  # refused at construction, naming the array and both ways to provide it
    module = cls(stand_in="load")
    with pytest.raises(ValueError, match="not loaded yet"):
        module(x)
    run = interpreter.interpret(block, env, stand_in=True)
    mod.load_interpreter_params(module, run.params)
    assert np.array_equal(module(x).numpy(), run(x.numpy())[0])
    again = cls(stand_in="load")
    again.load_state_dict(module.state_dict())
    again(x)
    with pytest.warns(UserWarning, match="stand-in"):
        stood = cls(stand_in=True)
    stood(x)


@pytest.mark.slow
def test_released_sizes_construct_on_meta_quickly(bundled):
    env = bundled.bind("released", {"b": 4}).env
    t0 = time.perf_counter()
    g = generate(interpreter.prefix(bundled.data), env)
    mod = load_module(g.source)
    with warnings.catch_warnings(), torch.device("meta"):
        module = getattr(mod, g.class_name)(stand_in="load")
    elapsed = time.perf_counter() - t0
    assert sum(p.numel() for p in module.parameters()) > 10 ** 10
    assert elapsed < 10, elapsed


def test_idiomatic_layers_are_found_and_loaded(bundled):
    """Matrix products over flattened target axes are nn.Linear (so PEFT/torchao/FSDP policies
    find them), RMSNorm with gain is F.rms_norm; interpreter weights [in..., out...] load into
    [out, in] (checked against a hand-flattened product), and a mis-shaped one is refused."""
    env = bundled.bind("tiny").env
    block = bundled.block("Mixing Coefficients")
    g = generate(block, env, runtime={"loader"})
    mod = load_module(g.source)
    module = getattr(mod, g.class_name)().double()
    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 3
    assert "F.rms_norm(" in g.source
    run = interpreter.interpret(block, env, stand_in=True)
    mod.load_interpreter_params(module, run.params)
    name = next(n for n in g.param_keys if n.endswith(".weight"))
    w = run.params[g.param_keys[name]]  # [in..., out...]
    layer = module.get_submodule(name.removesuffix(".weight"))
    x = torch.randn(3, layer.in_features, dtype=torch.float64)
    n_in, _ = mod.PARAM_LAYOUT[name]
    want = x.numpy() @ w.reshape(int(np.prod(w.shape[:n_in])), -1)
    got = torch.nn.functional.linear(x, layer.weight).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for wrong in (w.reshape(-1), w.reshape(w.shape[0], -1, 1)):
        bad = dict(run.params)
        bad[g.param_keys[name]] = wrong
        with pytest.raises(ValueError):
            mod.load_interpreter_params(module, bad)


def test_an_array_no_gradient_reaches_is_a_buffer(bundled):
    """The expert gate's correction bias only moves the top-k choice (through the selection
    and a comparison), so it is a persistent buffer: still in the state dict and PARAM_KEYS,
    not a parameter. Autograd, run with the buffer swapped for a leaf tensor, confirms that no
    gradient reaches it while the router weight gets one."""
    from ncdc.codegen.gradients import piecewise_constant
    from ncdc.ir.numeric import FREE_INPUT, IsPositive

    x_in = FREE_INPUT
    assert piecewise_constant(IsPositive(x_in)) and piecewise_constant(sympy.ceiling(2 * x_in))
    assert not piecewise_constant(x_in * IsPositive(x_in)) and not piecewise_constant(x_in / 3)
    env = bundled.bind("tiny").env
    for title in ("Expert Gate", "Mixture of Experts"):
        g = generate(bundled.block(title), env)
        module = getattr(load_module(g.source), g.class_name)().double()
        params = dict(module.named_parameters())
        buffers = dict(module.named_buffers())
        bias = next(k for k in g.param_keys if k.endswith("bias") and "expert_gate" in k
                    or k == "bias")
        assert bias in buffers and bias not in params and bias in module.state_dict()
        assert len(params) + 1 == len(g.param_keys)
    gate = generate(bundled.block("Expert Gate"), env)
    module = getattr(load_module(gate.source), gate.class_name)().double()
    leaf = torch.randn(module.bias.shape, dtype=torch.float64, requires_grad=True)
    x = torch.randn(5, module.w_r.in_features, dtype=torch.float64)
    gates, _ = torch.func.functional_call(module, {"bias": leaf}, (x,))
    (gates * torch.arange(gates.shape[-1], dtype=torch.float64)).sum().backward()
    assert leaf.grad is None or not leaf.grad.any()
    assert module.w_r.weight.grad is not None and module.w_r.weight.grad.abs().sum() > 0
