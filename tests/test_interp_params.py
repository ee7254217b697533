"""Parameters: the keys the evaluator reads are exactly ir.params.param_specs' (same order,
each once), seeded initialisation, fixed arrays by rule (Engram primes), user data and
stand-ins, saving and loading."""
from __future__ import annotations

import numpy as np
import pytest
import sympy

from ncdc import interpreter
from ncdc.interpreter.fixed import prime_window, primes_after
from ncdc.interpreter.weights import load_params, save_params
from ncdc.ir.errors import EvaluationError


@pytest.fixture(scope="module")
def tiny(bundled):
    return bundled.bind("tiny")


@pytest.fixture(scope="module")
def prefix(bundled):
    return interpreter.prefix(bundled.data)


class Recorder(dict):
    """A params dict that records the order in which keys are read."""

    def __init__(self, base):
        super().__init__(base)
        self.reads = []

    def __getitem__(self, key):
        self.reads.append(key)
        return super().__getitem__(key)


@pytest.mark.parametrize("fuse", [True, False])
def test_evaluator_reads_exactly_the_param_specs_keys_in_order(bundled, tiny, prefix, fuse):
    run = interpreter.interpret(prefix, tiny.env, stand_in=True, fuse=fuse)
    keys = [p.key for p in run.param_specs]
    assert keys == [p.key for p in bundled.params(prefix, tiny)]
    assert len(set(keys)) == len(keys)
    rec = Recorder(run.params)
    run._evaluator.params = rec
    run(*interpreter.random_inputs(prefix, tiny.env))
    assert rec.reads == keys
    # the prefix's keys are those of the same items under the whole (truncated) data
    whole = {p.key for p in bundled.params(bundled.data, tiny)}
    assert set(keys) <= whole


def test_per_occurrence_keys_of_the_shared_mixing_coefficients(prefix, tiny):
    run = interpreter.interpret(prefix, tiny.env, stand_in=True)
    mc = [k for k in run.params if k.endswith("Mixing Coefficients/H_{0}.weight")]
    assert mc == ["Sliding Window Layer/Single-Pass mHC/Mixing Coefficients/H_{0}.weight",
                  "Sliding Window Layer/Single-Pass mHC~1/Mixing Coefficients/H_{0}.weight"]
    # different arrays for the two occurrences give different results
    x = interpreter.random_inputs(prefix, tiny.env, 2)
    base = run(*x)[0]                          # the collapse vector of the MoE sublayer
    P = dict(run.params)
    P[mc[1]] = P[mc[1]] * 2
    changed = interpreter.interpret(prefix, tiny.env, params=P)(*x)[0]
    assert not np.array_equal(base, changed)


def test_initialisation_is_seeded_scaled_and_finite(bundled, tiny, prefix):
    a = interpreter.init_params(prefix, tiny.env, seed=1, stand_in=True)
    b = interpreter.init_params(prefix, tiny.env, seed=1, stand_in=True)
    c = interpreter.init_params(prefix, tiny.env, seed=2, stand_in=True)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["Embedding/Embedding/E.table"], c["Embedding/Embedding/E.table"])
    w = a["Sliding Window Layer/Single-Pass mHC/Sliding Window Attention/W^{KV}.weight"]
    assert abs(w.std() * np.sqrt(w.shape[0]) - 1) < 0.2            # N(0, 1/fan_in)
    assert np.all(a["Sliding Window Layer/Single-Pass mHC/RMSNorm.gain"] == 1)
    assert np.all(a["Sliding Window Layer/Single-Pass mHC/Sliding Window Attention/"
                    "sink.weight"] == 0)
    # activations stay O(1) through the layer and the Engram
    rms = {}

    def observe(block, titles, outs, batch):
        for v in outs:
            if v.values.dtype.kind == "i":
                continue                            # naturals (ids, hashes) are not activations
            x = np.asarray(v.values, dtype=np.complex128)
            rms.setdefault(" / ".join(titles), []).append(float(np.sqrt(np.mean(abs(x) ** 2))))

    run = interpreter.interpret(prefix, tiny.env, params=a)
    run.evaluate(*interpreter.random_inputs(prefix, tiny.env), observer=observe)
    values = [r for rs in rms.values() for r in rs]
    assert all(np.isfinite(values))
    layers = ("Sliding Window Attention", "Mixture of Experts", "Single-Pass mHC",
              "Sliding Window Layer", "Engram of Layer 1", "Embedding")
    big = [r for t, rs in rms.items() if t.split(" / ")[-1].split("~")[0] in layers for r in rs]
    assert len(big) >= 6 and max(big) < 10
    assert 0.3 < rms["Sliding Window Layer"][1] < 3


def test_engram_primes_by_rule(bundled, tiny):
    blk = bundled.block("N-gram Hash")
    p = interpreter.init_params(blk, tiny.env, stand_in=True)["N-gram Hash/p_{1}/p_{1}.value"]
    assert p.tolist() == [int(q) for q in sympy.primerange(101, 1000)][:24]
    assert p.sum() == 3828
    released = primes_after(16_000_000, 24)
    assert released[:3] == [16000057, 16000079, 16000081] and sum(released) == 384_006_168
    assert sum(primes_after(released[-1], 24)) == 384_016_682          # T_14
    assert prime_window(3828, 24)[0] == 101
    assert prime_window(3829, 24) is None


def test_engram_primes_check_the_bound(bundled):
    blk = bundled.block("N-gram Hash")
    env = bundled.bind("tiny", sizes={"T_1": 3830}).env
    with pytest.raises(EvaluationError, match=r"T_1 = 3830.*384,?006,?168|T_1 = 3830"):
        interpreter.init_params(blk, env, stand_in=True)
    env = bundled.bind("tiny", sizes={r"\bar{p}": 150}).env
    with pytest.raises(EvaluationError, match="not below the bound"):
        interpreter.init_params(blk, env, stand_in=True)


def test_released_primes_are_the_released_rule(bundled):
    blk = bundled.block("p_{1}")
    env = bundled.bind("released").env
    (p,) = interpreter.interpret(blk, env)()
    assert p[0] == 16000057 and p.sum() == 384_006_168


def test_user_data_is_an_error_unless_stand_ins_are_asked_for(bundled, tiny):
    blk = bundled.block("Engram of Layer 1")
    with pytest.raises(EvaluationError, match=r"E_\{cmp\}.*user"):
        interpreter.interpret(blk, tiny.env)
    run = interpreter.interpret(blk, tiny.env, stand_in=True)
    alpha = run.params["Engram of Layer 1/N-gram Hash/\\alpha_{1}/\\alpha_{1}.value"]
    assert np.all(alpha % 2 == 1) and np.all(alpha < 2**63 // 50) and np.all(alpha > 0)
    ecmp = run.params["Engram of Layer 1/Token Map/Token Map/E_{cmp}.table"]
    assert ecmp.dtype == np.int64 and ecmp.min() >= 0 and ecmp.max() < 50
    assert len(run.stand_ins) == 2
    # supplied user data is used as given (and is not a stand-in)
    given = interpreter.init_params(blk, tiny.env, stand_in=True)
    run2 = interpreter.interpret(blk, tiny.env, params=dict(given))
    assert run2.stand_ins == []


@pytest.mark.parametrize("ext", [".npz", ".safetensors"])
def test_save_and_load_round_trip(tmp_path, prefix, tiny, ext):
    P = interpreter.init_params(prefix, tiny.env, seed=3, stand_in=True)
    path = tmp_path / f"p{ext}"
    save_params(P, path)
    Q = load_params(path)
    assert set(Q) == set(P) and all(np.array_equal(P[k], Q[k]) and P[k].dtype == Q[k].dtype
                                    for k in P)
    x = interpreter.random_inputs(prefix, tiny.env)
    a = interpreter.interpret(prefix, tiny.env, params=P)(*x)
    b = interpreter.interpret(prefix, tiny.env, params=Q)(*x)
    assert all(np.array_equal(u, v) for u, v in zip(a, b, strict=True))


def test_missing_and_misshaped_parameters_name_key_and_shape(prefix, tiny):
    P = dict(interpreter.init_params(prefix, tiny.env, stand_in=True))
    key = "Sliding Window Layer/Single-Pass mHC/Sliding Window Attention/W^{Qa}.weight"
    bad = dict(P)
    bad[key] = np.zeros((3, 3))
    with pytest.raises(EvaluationError, match=r"W\^\{Qa\}.weight.*\(64, 32\).*m=64, q=32"):
        interpreter.interpret(prefix, tiny.env, params=bad)
    del bad[key]
    with pytest.raises(EvaluationError, match=r"missing parameter.*W\^\{Qa\}.*\(64, 32\)"):
        interpreter.interpret(prefix, tiny.env, params=bad)


def test_unreadable_parameter_file(tmp_path):
    f = tmp_path / "x.npz"
    f.write_text("not a zip")
    with pytest.raises(EvaluationError, match="cannot read"):
        load_params(f)
    with pytest.raises(EvaluationError, match="use one of"):
        load_params(tmp_path / "x.pt")
