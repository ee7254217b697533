"""Weight storage formats on the interpreter side (interpreter/storage_policy.py): encodings
bit-exact against ml_dtypes and against the interpreter's own MX rounding, byte counts equal to
the cost model's, the policy's matching rules, and ``ncdc eval --weights``."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import sympy

import ncdc
from ncdc import interpreter
from ncdc.cli import main
from ncdc.interpreter.quant import mx_block_round, round_bf16
from ncdc.interpreter.storage_policy import (
    StoragePolicy,
    apply_policy,
    decode,
    encode,
)
from ncdc.ir.cost import weight_bytes
from ncdc.ir.errors import SpecError
from ncdc.ir.params import param_specs
from tests.lazy import ml_dtypes


def rng_array(shape, seed=0, scale=3.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def hand_scale(group, top):
    """2^ceil(log2(max(amax, 1e-4) / top)), with Python floats."""
    a = max(max(abs(float(v)) for v in group), 1e-4)
    return 2.0 ** math.ceil(math.log2(a / top))


def test_mxfp8_codes_are_ml_dtypes_conversions():
    x = rng_array((3, 64), 1)
    st = encode(x, "mxfp8")  # trailing axis: 2 groups of 32 per row
    assert st.codes.dtype == ml_dtypes.float8_e4m3fn
    assert st.scales.dtype == ml_dtypes.float8_e8m0fnu and st.scales.shape == (3, 2)
    for r in range(3):
        for g in range(2):
            grp = x[r, 32 * g:32 * g + 32]
            s = hand_scale(grp, 448.0)
            assert float(st.scales[r, g]) == s
            want = (grp / s).astype(ml_dtypes.float8_e4m3fn)
            got = st.codes[r, 32 * g:32 * g + 32]
            assert want.view(np.uint8).tobytes() == got.view(np.uint8).tobytes()


def test_mxfp4_packing_low_nibble_first():
    x = np.zeros((1, 32))
    x[0, 0], x[0, 1] = 6.0, -0.5  # scale 1: codes 0b0111 (6) and 0b1001 (-0.5)
    st = encode(x, "mxfp4")
    assert float(st.scales[0, 0]) == 1.0
    assert st.codes.dtype == np.uint8 and st.codes.shape == (1, 16)
    assert st.codes[0, 0] == 0x07 | (0x09 << 4)
    assert np.array_equal(decode(st), x)


@pytest.mark.parametrize(("fmt", "element"), [("mxfp8", "E4M3"), ("mxfp4", "E2M1")])
def test_mx_decode_equals_interpreter_rounding(fmt, element):
    # a Linear weight [in=64, out=5]: groups run along the contracted axis 0
    x = rng_array((64, 5), 2)
    assert np.array_equal(decode(encode(x, fmt, lead=1)),
                          mx_block_round(x, element, 32, axis=0))
    y = rng_array((4, 96), 3)
    assert np.array_equal(decode(encode(y, fmt)), mx_block_round(y, element, 32, axis=-1))


def test_partial_group_and_bytes():
    x = rng_array((3, 70), 4)
    for fmt in ("float32", "bfloat16", "mxfp8", "mxfp4"):
        st = encode(x, fmt)
        assert st.nbytes == weight_bytes((3, 70), fmt)
        y = decode(st)
        assert y.shape == x.shape
    st = encode(x, "mxfp8")
    tail = x[:, 64:]  # the partial third group of each row: 6 values
    for r in range(3):
        s = hand_scale(tail[r], 448.0)
        want = (tail[r] / s).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * s
        assert np.array_equal(decode(st)[r, 64:], want)


@pytest.mark.parametrize(("shape", "lead"), [((64, 5), 1), ((2, 48, 3), 2), ((7,), 0),
                                             ((5, 3, 40), 0)])
def test_stored_bytes_match_the_cost_model(shape, lead):
    x = rng_array(shape, 5)
    for fmt in ("float32", "bfloat16", "mxfp8", "mxfp4"):
        assert encode(x, fmt, lead).nbytes == weight_bytes(tuple(map(sympy.Integer, shape)),
                                                           fmt, lead)


def test_bfloat16_and_float32():
    x = rng_array((5, 7), 6)
    assert np.array_equal(decode(encode(x, "bfloat16")), round_bf16(x))
    assert np.array_equal(decode(encode(x, "float32")), x.astype(np.float32).astype(np.float64))


def test_policy_first_match_wins(tmp_path):
    pol = StoragePolicy.parse(["*/Routed Experts/*=fp4", "bf16"])
    assert pol.format_for("a/Routed Experts/W^{G}.weight") == "mxfp4"
    assert pol.format_for("a/Shared Expert/W^{Gs}.weight") == "bfloat16"
    js = tmp_path / "p.json"
    js.write_text(json.dumps({"rules": [{"pattern": "*.table", "format": "mxfp8"}]}))
    toml = tmp_path / "p.toml"
    toml.write_text('[[rules]]\npattern = "*W^{Qa}*"\nformat = "float32"\n')
    pol = StoragePolicy.parse([str(js), str(toml)])
    assert pol.format_for("Embedding/Embedding/E.table") == "mxfp8"
    assert pol.format_for("x/W^{Qa}.weight") == "float32"
    assert pol.format_for("x/W^{Qb}.weight") is None
    for bad in (["fp7"], ["*=int3"], [str(tmp_path / "missing.json")]):
        with pytest.raises(SpecError):
            StoragePolicy.parse(bad)


def test_apply_policy_touches_only_learned_reals():
    spec = ncdc.load()
    env = spec.bind("tiny").env
    m = spec.block("Engram of Layer 1")
    params = interpreter.interpret(m, env, stand_in=True).params
    specs = param_specs(m, env)
    out, report = apply_policy(params, specs, StoragePolicy.parse(["mxfp4"]))
    keys = {k for k, _, _ in report}
    for p in specs:
        if p.learned and p.value_kind == "real":
            assert p.key in keys
            assert not np.array_equal(out[p.key], params[p.key]) or not params[p.key].any()
        else:
            assert p.key not in keys and out[p.key] is params[p.key]
    assert out.stand_ins == params.stand_ins


def test_eval_weights_matches_rounded_parameters(tmp_path, capsys):
    spec = ncdc.load()
    env = spec.bind("tiny").env
    m = spec.block("Shared Expert")
    base = interpreter.interpret(m, env, seed=0)
    # independent: round each Linear weight [in, out] along its input axis by hand
    rounded = {k: mx_block_round(v, "E2M1", 32, axis=0) for k, v in base.params.items()}
    x = interpreter.random_inputs(m, env, 0)
    want = interpreter.interpret(m, env, params=rounded).evaluate(*x).outputs[0].values
    out = tmp_path / "o.npz"
    rc = main(["eval", "--block", "Shared Expert", "--weights", "mxfp4", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "weights held in storage formats: 3 array(s), 3,264 bytes" in text
    with np.load(out) as f:
        assert np.array_equal(f["out0"], want)
        exact = base.evaluate(*x).outputs[0].values
        assert not np.array_equal(f["out0"], exact)
