"""Liveness at the boundary: a block compiled on its own takes ``<input>_live`` for inputs that
can carry dead positions, and ``ncdc check`` feeds the dead positions the model gives it. The
issue's case: Attention Core alone, fed a windowed K with dead slots."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from ncdc import interpreter
from ncdc.codegen import generate, instantiate, load_module
from ncdc.codegen.boundary import can_be_dead, mask_names
from ncdc.verify.check import ModuleCache, check_morphism
from ncdc.verify.recorded import record_block_inputs
from tests.lazy import torch

CACHE = ModuleCache()


@pytest.fixture(scope="module")
def env(bundled):
    return bundled.bind("tiny").env


@pytest.fixture(scope="module")
def recorded(bundled, env):
    return record_block_inputs(interpreter.prefix(bundled.data), env)


@pytest.fixture(scope="module")
def core(bundled):
    return bundled.block("Attention Core")


def test_the_model_gives_attention_core_dead_window_slots(core, recorded):
    fed = recorded[id(core)]
    assert [can_be_dead(a) for a in core.dom] == [False, False, True]
    live = fed[2][1]
    assert live is not None and 0 < live.sum() < live.size
    # dead slots are the window's out-of-range ones: the first token sees only itself
    assert live[0, :, 0].sum() == 1


def test_forward_takes_an_optional_mask(core, env):
    g = generate(core, env)
    module = instantiate(load_module(g.source), g.class_name, torch.float64)
    params = inspect.signature(module.forward).parameters
    (name,) = [p for p in params if p.endswith("_live")]
    assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
    assert params[name].default is None
    assert mask_names(module, core.dom) == {2: name}


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_attention_core_alone_with_dead_slots_agrees(core, env, recorded, dtype):
    fed = recorded[id(core)]
    kw = {"masks": [live for _, live in fed]}
    if dtype != "float64":
        kw["inputs"] = [values for values, _ in fed]
    r = check_morphism(core, env, dtype=dtype, cache=CACHE, **kw)
    assert r.ok, r.problem


def test_the_mask_matters(core, env, recorded):
    """Without its mask the module averages over the dead slots too (the issue's 1.1 error);
    with it, it matches the interpreter, whatever the dead slots hold."""
    (s, _), (q, _), (k, live) = recorded[id(core)]
    rng = np.random.default_rng(3)
    k = np.where(live, k, rng.standard_normal(k.shape))  # garbage in the dead slots
    want = interpreter.interpret(core, env)(s, q, (np.where(live, k, 0), live))[0]
    g = generate(core, env)
    module = instantiate(load_module(g.source), g.class_name, torch.float64)
    (name,) = mask_names(module, core.dom).values()
    args = [torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (s, q, k)]
    with torch.no_grad():
        with_mask = module(*args, **{name: torch.from_numpy(live)})
        without = module(*args)
    got = with_mask[0] if isinstance(with_mask, tuple) else with_mask
    bad = without[0] if isinstance(without, tuple) else without
    assert np.allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    assert np.max(np.abs(bad.numpy() - want)) > 1e-2
