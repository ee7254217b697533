"""Generated PyTorch against the reference interpreter (an independent implementation of
docs/format.md): every distinct block of the bundled spec (salvaged) and of the older pyncd examples,
and the whole models, in exact mode (float64, 1e-10 relative) and emulate mode (bit for bit on
every quantised output); plus batch dims and token counts the module was not built for."""
from __future__ import annotations

import numpy as np
import pytest

from ncdc import interpreter
from ncdc.codegen import generate, instantiate, load_module
from ncdc.codegen.fingerprint import structural_key
from ncdc.verify.check import ModuleCache, check_morphism, run_generated
from tests.conftest import ATTENTION_CORE, TRANSFORMER, loaded
from tests.lazy import torch

CACHE = ModuleCache()
"""Generated modules shared by every test of this file (one per block body and mode)."""


def _distinct_sites(spec):
    keys: dict = {}
    out, seen = [], set()
    for site in spec.blocks():
        key = structural_key(site.node, keys)
        if key not in seen:
            seen.add(key)
            out.append((site, key))
    return out


def _params(spec_loader):
    spec = spec_loader()
    return [pytest.param(i, id=f"{i}-{site.node.title[:30]}")
            for i, (site, _) in enumerate(_distinct_sites(spec))]


def _spec(which):
    return loaded({"bundled": None, "transformer": TRANSFORMER,
                   "attention_core": ATTENTION_CORE}[which])


def _check(which: str, index: int | None, quant: str, dtype: str = "float64"):
    spec = _spec(which)
    env = spec.bind("tiny").env
    if index is None:
        m, key, name = interpreter.prefix(spec.data), None, "whole model"
    else:
        site, key = _distinct_sites(spec)[index]
        m, name = site.node, " / ".join(site.titles)
    r = check_morphism(m, env, name=name, quant=quant, dtype=dtype, cache=CACHE, key=key)
    assert r.ok, f"{name} ({site.path if index is not None else 'data'}): {r.problem}"
    return r


DISTINCT_SITES = {"bundled": 87, "transformer": 8}
"""How many structurally distinct blocks each spec has: the tests are parametrized by index
without loading the specs at collection (``test_the_distinct_site_counts_are_current``)."""
BUNDLED_SITES = range(DISTINCT_SITES["bundled"])
TRANSFORMER_SITES = range(DISTINCT_SITES["transformer"])


def test_the_distinct_site_counts_are_current():
    assert {which: len(_distinct_sites(_spec(which))) for which in DISTINCT_SITES} == DISTINCT_SITES


@pytest.mark.parametrize("quant", ["exact", pytest.param("emulate", marks=pytest.mark.slow)])
@pytest.mark.parametrize("index", BUNDLED_SITES)
def test_bundled_block(index, quant):
    _check("bundled", index, quant)


@pytest.mark.parametrize("quant", ["exact", "emulate"])
@pytest.mark.parametrize("index", TRANSFORMER_SITES)
def test_transformer_block(index, quant):
    _check("transformer", index, quant)


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["exact", "emulate"])
@pytest.mark.parametrize("which", ["bundled", "transformer", "attention_core"])
def test_whole_model(which, quant):
    r = _check(which, None, quant)
    if quant == "exact":
        assert r.max_rel < 1e-12


@pytest.mark.slow
def test_whole_prefix_float32():
    r = _check("bundled", None, "exact", dtype="float32")
    assert r.max_rel < 1e-5


def test_attention_core_example_blocks():
    for i in range(len(_distinct_sites(_spec("attention_core")))):
        for quant in ("exact", "emulate"):
            _check("attention_core", i, quant)


def _compiled(m, env):
    g = generate(m, env, runtime={"loader"})
    module = instantiate(load_module(g.source), g.class_name, torch.float64)
    return g, module


@pytest.mark.slow
@pytest.mark.parametrize("title", ["Sliding Window Attention", "Engram of Layer 1", None])
def test_batch_dims_and_other_token_counts(title):
    """One module, built at tiny (12 tokens), serves a 2x3 batch of 6-token inputs: each
    sample equals the interpreter evaluated at b=3."""
    spec = _spec("bundled")
    env = spec.bind("tiny").env
    m = interpreter.prefix(spec.data) if title is None else spec.block(title)
    g, module = _compiled(m, env)
    base = interpreter.interpret(m, env, stand_in=True)
    g.load_params(module, base.params)
    env3 = spec.bind("tiny", sizes={"b": 3}).env
    run = interpreter.interpret(m, env3, params=dict(base.params), stand_in=True)
    ins = [interpreter.random_inputs(m, env3, s) for s in range(6)]
    tapes = [interpreter.random_tape(m, env3, s) for s in range(6)]
    refs = [run.evaluate(*i, tape=t).outputs for i, t in zip(ins, tapes, strict=True)]
    batched = [np.stack([i[k] for i in ins]).reshape((2, 3) + np.shape(ins[0][k]))
               for k in range(len(ins[0]))]
    tape = {u: np.stack([t[u] for t in tapes]).reshape((2, 3) + tapes[0][u].shape)
            for u in tapes[0]}
    got = run_generated(g, module, batched, tape, "float64")
    for j, (v, live) in enumerate(got):
        v = v.numpy().reshape((6,) + tuple(v.shape[2:]))
        lv = None if live is None else np.broadcast_to(live.numpy(), (2, 3) + v.shape[1:])
        for s in range(6):
            ref = refs[s][j]
            want_live = np.ones(ref.values.shape, bool) if ref.live is None else ref.live
            if lv is not None:
                assert np.array_equal(lv.reshape((6,) + v.shape[1:])[s], want_live)
            np.testing.assert_allclose(np.where(want_live, v[s], 0), ref.values, rtol=1e-10,
                                       atol=1e-12)


@pytest.mark.slow
def test_load_interpreter_params_of_generated_file():
    """The generated file's own loader takes interpreter-keyed arrays (one weights file for
    both) and PARAM_KEYS covers exactly the interpreter's keys."""
    spec = _spec("bundled")
    env = spec.bind("tiny").env
    m = interpreter.prefix(spec.data)
    g = generate(m, env, runtime={"loader"})
    mod = load_module(g.source)
    module = instantiate(mod, g.class_name, torch.float64)
    run = interpreter.interpret(m, env, stand_in=True)
    assert set(mod.PARAM_KEYS.values()) == {p.key for p in run.param_specs}
    assert set(mod.PARAM_KEYS) == set(module.state_dict())
    mod.load_interpreter_params(module, run.params)
    for name, key in mod.PARAM_KEYS.items():
        want = run.params[key]
        if name in mod.PARAM_LAYOUT:  # an nn.Linear: [in..., out...] stored as [out, in]
            n_in, _ = mod.PARAM_LAYOUT[name]
            want = want.reshape(-1, module.state_dict()[name].shape[0]).T if n_in \
                else want.reshape(-1)
        np.testing.assert_array_equal(module.state_dict()[name].numpy(), want)
    with pytest.raises(KeyError):
        mod.load_interpreter_params(module, {})
