"""Quantisation modes (docs/format.md §12, interpreter/QUANT_POLICY.md): exact mode never rounds;
emulate mode rounds at every TypeConvert (bit-exact against ml_dtypes) and the results of
operations whose output weave is a quantised real."""
from __future__ import annotations

import numpy as np
import pytest

from ncdc import interpreter
from ncdc.ir import Linear, TypeConvert
from ncdc.ir.env import Env
from ncdc.ir.names import Name
from tests.lazy import ml_dtypes
from tests.oracles.common import bf16, e4m3
from tests.oracles.ir_build import MXFP8, C, Q, R, axis, bc, nat, rearr, weave

ENV = Env()
MX_PATH = ("data.content[2].body.content[0].body.content[3].content[1].content[2].content[0]"
           ".content[0].content[0].content[3].operator.block.body.content[0].operator.block")


def convert(src, dst, n):
    x = axis("x", n)
    return bc(TypeConvert(None, source=src, target=dst), [weave(src, "*")], [weave(dst, "*")],
              [rearr([0], x)])


def all_bf16():
    with np.errstate(invalid="ignore"):
        v = np.arange(2**16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    return v[np.isfinite(v)]


def test_bf16_rounding_is_bit_exact_on_every_pattern_and_between_them():
    v = all_bf16()
    mids = np.sort(v)
    mids = (mids[:-1] + mids[1:]) / 2                         # exact ties between neighbours
    rng = np.random.default_rng(0)
    rand = rng.standard_normal(40000).astype(np.float32).astype(np.float64) * \
        np.exp2(rng.integers(-140, 128, 40000))
    for x in (v, mids[np.isfinite(mids)], rand):
        m = convert(Q("FP32"), Q("BF16"), x.size)
        (got,) = interpreter.interpret(m, ENV, quant="emulate")(x)
        with np.errstate(over="ignore"):
            want = x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
        assert np.array_equal(got.view(np.int64), want.view(np.int64))
        (same,) = interpreter.interpret(m, ENV)(x)             # exact mode: the identity
        assert np.array_equal(same.view(np.int64), x.view(np.int64))


def test_bf16_overflow_rounds_to_infinity_like_ieee():
    big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    x = np.array([big, big * (1 + 2**-9), -big * 1.01, 3.4e38])
    (got,) = interpreter.interpret(convert(Q("FP32"), Q("BF16"), 4), ENV, quant="emulate")(x)
    with np.errstate(over="ignore"):
        want = x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    assert np.array_equal(got, want)
    assert got[1] == big and np.isinf(got[2:]).all()        # below the half-ulp: max; past: inf


def test_e4m3_rounds_like_ml_dtypes_and_saturates():
    v = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    v = np.sort(v[np.isfinite(v)])
    x = np.concatenate([v, (v[:-1] + v[1:]) / 2, [500.0, -1e6, 449.0]])
    (got,) = interpreter.interpret(convert(Q("FP32"), Q("E4M3"), x.size), ENV,
                                   quant="emulate")(x)
    assert np.array_equal(got[:-3], e4m3(x[:-3]))
    assert got[-3:].tolist() == [448.0, -448.0, 448.0]       # saturation (documented choice)


def test_mxfp8_cast_block_groups_32_channels_along_the_last_axis(bundled):
    env = bundled.bind("tiny").env
    blk = bundled.block(MX_PATH)
    assert blk.title == "Cast to MXFP8"
    run = interpreter.interpret(blk, env, quant="emulate")
    rng = np.random.default_rng(1)
    shape = run.dom_shapes()[0]                               # [x, m] = (12, 64)
    x = bf16(rng.standard_normal(shape) * np.exp(rng.uniform(-8, 8, shape)))
    (got,) = run(x)
    g = x.reshape(shape[0], -1, 32)
    a = np.abs(g).max(-1, keepdims=True)
    s = 2.0 ** np.ceil(np.log2(np.maximum(a, 1e-4) / 448.0))
    want = (e4m3(np.clip(g / s, -448, 448)) * s).reshape(shape)
    assert np.array_equal(got, want)
    (same,) = interpreter.interpret(blk, env)(x)
    assert np.array_equal(same, x)


def test_complex_conversion_rounds_both_parts():
    z = np.array([1 + 1j, np.pi + np.e * 1j, -1e-3 + 7.77j])
    (got,) = interpreter.interpret(convert(C(Q("FP32")), C(Q("BF16")), 3), ENV,
                                   quant="emulate")(z)
    assert np.array_equal(got.real, bf16(z.real)) and np.array_equal(got.imag, bf16(z.imag))


def test_int32_conversion_saturates():
    n = nat(2**63)
    m = convert(Q("INT64", wraps=n), Q("INT32", wraps=n), 3)
    (got,) = interpreter.interpret(m, ENV, quant="emulate")(np.array([5, 2**40, 2**31 - 1]))
    assert got.tolist() == [5, 2**31 - 1, 2**31 - 1]


@pytest.mark.parametrize(("out_dt", "rounded"), [(Q("BF16"), True), (R, False)])
def test_operation_results_round_to_their_output_format(out_dt, rounded):
    x, m, o = axis("x", 5), axis("m", 8), axis("o", 3)
    lin = bc(Linear(Name("W")), [weave(Q("FP32"), "*", m)], [weave(out_dt, "*", o)],
             [rearr([0], x)])
    rng = np.random.default_rng(2)
    W = rng.standard_normal((8, 3))
    X = rng.standard_normal((5, 8))
    (got,) = interpreter.interpret(lin, ENV, params={"W.weight": W}, quant="emulate")(X)
    exact = X @ W
    assert np.array_equal(got, bf16(exact)) if rounded else np.allclose(got, exact, 1e-14, 0)


def test_mx_rounding_groups_need_a_multiple_of_32(bundled):
    env = bundled.bind("tiny", sizes={"m": 48}).env
    blk = bundled.block(MX_PATH)
    run = interpreter.interpret(blk, env, quant="emulate")
    with pytest.raises(interpreter.api.EvaluationError, match="multiple of channels=32"):
        run(np.ones(run.dom_shapes()[0]))
    assert MXFP8.scale is not None
