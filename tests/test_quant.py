"""Rounding to quantised formats (docs/format.md §12): numpy interpreter vs ml_dtypes ground truth,
and the torch prelude vs the numpy interpreter, bit for bit."""

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from ncdc.interpreter import quant as nq
from tests.lazy import lazy, ml_dtypes, torch

tq = lazy("ncdc.codegen.prelude.quant")
"""The prelude module, imported (with torch) by the first test that uses it."""

PRELUDE = Path(__file__).resolve().parents[1] / "codegen" / "prelude" / "quant.py"


def assert_same(got, want):
    """Bit-exact equality of float64 arrays; NaN equals NaN, -0.0 differs from +0.0."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    gn, wn = np.isnan(got), np.isnan(want)
    assert np.array_equal(gn, wn), f"NaN mismatch at {np.argwhere(gn != wn)[:5].tolist()}"
    g, w = got[~gn], want[~wn]
    bad = g.view(np.int64) != w.view(np.int64)
    assert not bad.any(), f"{bad.sum()} mismatches, e.g. x->{g[bad][:5]} want {w[bad][:5]}"


def via(x, dtype):
    """Ground truth: ml_dtypes conversion of float32-representable values."""
    with np.errstate(invalid="ignore"):
        return np.asarray(x, dtype=np.float32).astype(dtype).astype(np.float64)


def code_points(dtype, nbits=8):
    return np.arange(2**nbits, dtype=np.uint8).view(dtype).astype(np.float64)


def midpoints(grid):
    """Exact midpoints between consecutive finite grid values (ties), both signs."""
    g = np.unique(np.abs(grid[np.isfinite(grid)]))
    mid = (g[:-1] + g[1:]) / 2
    return np.concatenate([mid, -mid])


def between(grid, rng, n):
    """Random float32 values strictly inside the gaps of a sorted grid of magnitudes."""
    g = np.unique(np.abs(grid[np.isfinite(grid)]))
    i = rng.integers(0, len(g) - 1, n)
    t = rng.random(n)
    x = (g[i] + t * (g[i + 1] - g[i])).astype(np.float32)
    return np.concatenate([x, -x]).astype(np.float64)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# ---------------------------------------------------------------- numpy vs ml_dtypes


def test_bf16_all_patterns_and_between(rng):
    pats = (np.arange(2**16, dtype=np.uint32) << 16).view(np.float32)
    ties = ((np.arange(2**16, dtype=np.uint32) << 16) | 0x8000).view(np.float32)
    rand = rng.integers(0, 2**32, 400_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    near = ((np.arange(2**16, dtype=np.uint32) << 16)
            | rng.choice(np.array([0x7FFF, 0x8001, 1, 0xFFFF], np.uint32), 2**16)
            ).view(np.float32)
    for x in (pats, ties, rand, near):
        with np.errstate(invalid="ignore"):  # signalling-NaN patterns warn when cast
            assert_same(nq.round_bf16(x.astype(np.float64)), via(x, ml_dtypes.bfloat16))


def test_bf16_float64_rounds_to_float32_first(rng):
    x = rng.standard_normal(50_000) * 10.0 ** rng.uniform(-30, 30, 50_000)
    want = x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    assert_same(nq.round_bf16(x), want)


def test_bf16_overflow_and_specials():
    big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    x = np.array([big, -big, 3.4e38, -3.4e38, 1e39, np.inf, -np.inf, np.nan, -0.0])
    assert_same(nq.round_bf16(x), [big, -big, np.inf, -np.inf, np.inf, np.inf, -np.inf,
                                   np.nan, -0.0])


def test_e4m3_code_points_random_and_ties(rng):
    pts = code_points(ml_dtypes.float8_e4m3fn)
    assert_same(nq.round_e4m3(pts), pts)  # includes both NaN codes and -0
    rand = rng.uniform(-448, 448, 200_000).astype(np.float32).astype(np.float64)
    small = (rng.uniform(-1, 1, 50_000) * 2.0 ** rng.uniform(-12, 0, 50_000))
    small = small.astype(np.float32).astype(np.float64)
    for x in (rand, small, midpoints(pts), between(pts, rng, 50_000)):
        assert_same(nq.round_e4m3(x), via(x, ml_dtypes.float8_e4m3fn))


def test_e4m3_saturates():
    x = np.array([448.0, 449.0, 464.0, 480.0, 1e6, 1e300, np.inf, -460.0, -np.inf, np.nan])
    assert_same(nq.round_e4m3(x), [448, 448, 448, 448, 448, 448, 448, -448, -448, np.nan])


def test_e5m2_in_range_and_saturation(rng):
    pts = code_points(ml_dtypes.float8_e5m2)
    fin = pts[np.isfinite(pts)]
    assert_same(nq.round_e5m2(fin), fin)
    rand = (rng.uniform(-1, 1, 100_000) * 2.0 ** rng.uniform(-18, 16, 100_000))
    rand = np.clip(rand, -57344, 57344).astype(np.float32).astype(np.float64)
    for x in (rand, midpoints(pts), between(pts, rng, 50_000)):
        assert_same(nq.round_e5m2(x), via(x, ml_dtypes.float8_e5m2))
    x = np.array([57344.0, 60000.0, 61440.0, 1e9, np.inf, -np.inf, np.nan])
    assert_same(nq.round_e5m2(x), [57344, 57344, 57344, 57344, 57344, -57344, np.nan])


def test_e2m1_in_range_and_saturation(rng):
    pts = code_points(ml_dtypes.float4_e2m1fn, nbits=4)
    assert sorted(set(np.abs(pts))) == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert_same(nq.round_e2m1(pts), pts)
    rand = rng.uniform(-6, 6, 100_000).astype(np.float32).astype(np.float64)
    for x in (rand, midpoints(pts), between(pts, rng, 20_000)):
        assert_same(nq.round_e2m1(x), via(x, ml_dtypes.float4_e2m1fn))
    x = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.5, 7.0, 1e9, np.inf, -np.inf, np.nan])
    assert_same(nq.round_e2m1(x), [0, 1, 1, 2, 2, 4, 4, 6, 6, 6, 6, -6, np.nan])


def test_fp16_and_fp32(rng):
    x = rng.standard_normal(100_000) * 10.0 ** rng.uniform(-9, 6, 100_000)
    specials = np.array([65504, 65519.99, 65520, -65520, 2.0**-25, 3 * 2.0**-26, 1e300,
                         np.inf, -np.inf, np.nan, -0.0])
    for v in (x, specials):
        with np.errstate(over="ignore"):
            assert_same(nq.round_fp16(v), v.astype(np.float16).astype(np.float64))
            assert_same(nq.round_fp32(v), v.astype(np.float32).astype(np.float64))


def test_ue8m0():
    x = np.array([1.0, 1.4142, 1.4143, 0.75, 0.7, 3.0, 2.0**-130, 0.0, 2.0**200, np.inf,
                  -1.0, np.nan, 2.0**127, 2.0**-127])
    want = [1, 1, 2, 1, 0.5, 4, 2.0**-127, 2.0**-127, 2.0**127, 2.0**127, np.nan, np.nan,
            2.0**127, 2.0**-127]
    assert_same(nq.round_ue8m0(x), want)


def test_int_rounding():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, 3e9, -3e9, np.inf, -np.inf])
    got = nq.round_int32(x)
    assert got.dtype == np.int64
    assert got.tolist() == [0, 2, 2, 0, -2, 2, 2**31 - 1, -(2**31), 2**31 - 1, -(2**31)]
    got = nq.round_int64(np.array([2.0**63, -(2.0**63), 1e30, 2.0**62, -2.5]))
    assert got.tolist() == [2**63 - 1, -(2**63), 2**63 - 1, 2**62, -2]
    assert nq.round_int32(np.array([2**40, -5], dtype=np.int64)).tolist() == [2**31 - 1, -5]
    with pytest.raises(ValueError):
        nq.round_int32(np.array([np.nan]))


def test_round_to_dispatch():
    x = np.array([1.0 + 1 / 3, 500.0])
    assert_same(nq.round_to(x, "E4M3"), nq.round_e4m3(x))
    assert_same(nq.round_to(x, "BF16"), nq.round_bf16(x))
    assert nq.round_to(x, "INT64").tolist() == [1, 500]
    z = nq.round_to(np.array([1 / 3 + 500j]), "E4M3")
    assert z.dtype == np.complex128 and z[0] == complex(0.34375, 448)
    with pytest.raises(ValueError, match="FP128"):
        nq.round_to(x, "FP128")


# ---------------------------------------------------------------- MX block rounding


def mx_reference(x, element, channels):
    """Independent per-group loop straight from the formula, elements via ml_dtypes."""
    big, dtype = {"E4M3": (448.0, ml_dtypes.float8_e4m3fn),
                  "E2M1": (6.0, ml_dtypes.float4_e2m1fn),
                  "E5M2": (57344.0, ml_dtypes.float8_e5m2)}[element]
    flat = x.reshape(-1, x.shape[-1])
    out = np.empty_like(flat)
    for r in range(flat.shape[0]):
        for start in range(0, flat.shape[1], channels):
            grp = flat[r, start:start + channels]
            a = max(abs(float(v)) for v in grp)
            s = 2.0 ** math.ceil(math.log2(max(a, 1e-4) / big))
            for j, v in enumerate(grp):
                e = np.float32(min(max(float(v) / s, -big), big)).astype(dtype)
                out[r, start + j] = float(e) * s
    return out.reshape(x.shape)


@pytest.mark.parametrize("element", ["E4M3", "E2M1", "E5M2"])
def test_mx_block_round_matches_loop(rng, element):
    x = (rng.standard_normal((2, 3, 128)) * 10.0 ** rng.uniform(-6, 4, (2, 3, 1)))
    x = x.astype(np.float32).astype(np.float64)
    x[0, 0, :32] = 0.0  # all-zero group: floor 1e-4
    x[0, 1, :32] = np.linspace(-1, 1, 32) * 448.0 * 4  # max exactly 448 * 2^2
    x[1, 2, 32:64] *= 1e-7  # below the 1e-4 floor
    got = nq.mx_block_round(x, element)
    assert got.dtype == np.float64 and got.shape == x.shape
    assert_same(got, mx_reference(x, element, 32))


def test_mx_block_round_axis_channels_and_errors(rng):
    x = rng.standard_normal((64, 5))
    assert_same(nq.mx_block_round(x, axis=0), nq.mx_block_round(x.T).T)
    assert_same(nq.mx_block_round(x.T, channels=16), mx_reference(x.T, "E4M3", 16))
    with pytest.raises(ValueError, match="48"):
        nq.mx_block_round(np.zeros((2, 48)))
    with pytest.raises(ValueError):
        nq.mx_block_round(np.zeros(32), element="INT8")
    y = np.ones(64)
    y[3] = np.nan
    got = nq.mx_block_round(y)
    assert np.isnan(got[:32]).all() and (got[32:] == 1).all()


# ---------------------------------------------------------------- torch prelude == numpy


def parity_inputs(rng):
    mags = rng.standard_normal(20_000) * 10.0 ** rng.uniform(-12, 12, 20_000)
    grids = [code_points(ml_dtypes.float8_e4m3fn), code_points(ml_dtypes.float8_e5m2),
             code_points(ml_dtypes.float4_e2m1fn, nbits=4)]
    ties = np.concatenate([midpoints(g) for g in grids]
                          + [np.array([65520.0, 2.0**-25, 1 + 2.0**-8, 3 * 2.0**-9])])
    bf16_ties = ((rng.integers(0, 2**16, 5000, dtype=np.uint32) << 16) | 0x8000)
    bf16_ties = bf16_ties[~np.isnan(bf16_ties.view(np.float32))]
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, -1e300, 5e-324, 3.5e38])
    return np.concatenate([mags, ties, bf16_ties.view(np.float32).astype(np.float64),
                           rng.uniform(-500, 500, 5000), specials])


FLOAT_FNS = ["round_fp32", "round_fp16", "round_bf16", "round_e4m3", "round_e5m2",
             "round_e2m1", "round_ue8m0"]


@pytest.mark.parametrize("name", FLOAT_FNS)
def test_prelude_matches_numpy(rng, name):
    x64 = parity_inputs(rng)
    got = getattr(tq, name)(torch.from_numpy(x64))
    assert got.dtype == torch.float64
    assert_same(got.numpy(), getattr(nq, name)(x64))
    with np.errstate(over="ignore"):
        x32 = x64.astype(np.float32)
    got = getattr(tq, name)(torch.from_numpy(x32))
    assert got.dtype == torch.float32
    assert_same(got.numpy(), getattr(nq, name)(x32))


def test_prelude_int_matches_numpy(rng):
    x = np.concatenate([rng.uniform(-1e4, 1e4, 5000), np.arange(-10, 10) + 0.5,
                        [3e9, -3e9, 1e19, -1e19, 2.0**63, -(2.0**63), np.inf, -np.inf]])
    for name in ("round_int32", "round_int64"):
        got = getattr(tq, name)(torch.from_numpy(x))
        assert got.dtype == torch.int64
        assert np.array_equal(got.numpy(), getattr(nq, name)(x))
        i = torch.tensor([2**40, -(2**40), 7])
        assert np.array_equal(getattr(tq, name)(i).numpy(), getattr(nq, name)(i.numpy()))
    with pytest.raises(ValueError):
        tq.round_int32(torch.tensor([float("nan")]))


@pytest.mark.parametrize("element", ["E4M3", "E2M1", "E5M2"])
def test_prelude_mx_matches_numpy(rng, element):
    x = rng.standard_normal((4, 3, 96)) * 10.0 ** rng.uniform(-8, 8, (4, 3, 1))
    x[0, 0, :32] = 0.0
    x[0, 1, :32] = np.linspace(-1, 1, 32) * 448.0 * 8
    x[1, 1, 5] = np.nan
    for arr in (x, x.astype(np.float32)):
        for axis, channels in ((-1, 32), (-1, 16), (0, 2)):
            got = tq.mx_block_round(torch.from_numpy(arr), element, channels, axis)
            assert got.dtype == torch.from_numpy(arr).dtype
            assert_same(got.numpy(), nq.mx_block_round(arr, element, channels, axis))
    with pytest.raises(ValueError, match="48"):
        tq.mx_block_round(torch.zeros(2, 48))


def test_prelude_round_to(rng):
    x = parity_inputs(rng)[:2000]
    for enc in ("FP32", "FP16", "BF16", "E5M2", "E4M3", "E2M1", "UE8M0"):
        assert_same(tq.round_to(torch.from_numpy(x), enc).numpy(), nq.round_to(x, enc))
    xi = x[np.isfinite(x)]
    for enc in ("INT32", "INT64"):
        assert np.array_equal(tq.round_to(torch.from_numpy(xi), enc).numpy(),
                              nq.round_to(xi, enc))
    z = np.array([1 / 3 + 500j, -7.0 - 0.3j])
    assert np.array_equal(tq.round_to(torch.from_numpy(z), "E4M3").numpy(),
                          nq.round_to(z, "E4M3"))
    with pytest.raises(ValueError):
        tq.round_to(torch.zeros(3), "FP128")


def test_prelude_is_self_contained():
    tree = ast.parse(PRELUDE.read_text())
    public = {"round_bf16", "round_e4m3", "round_e2m1", "round_e5m2", "round_fp16",
              "round_fp32", "round_ue8m0", "round_int32", "round_int64", "mx_block_round",
              "round_to", "held"}
    defined = set()
    for i, node in enumerate(tree.body):
        if isinstance(node, ast.Import):
            assert {a.name for a in node.names} <= {"torch", "math"}
        elif isinstance(node, ast.FunctionDef):
            assert node.name in public or node.name.startswith("_"), node.name
            defined.add(node.name)
        else:
            is_docstring = (i == 0 and isinstance(node, ast.Expr)
                            and isinstance(node.value, ast.Constant))
            assert is_docstring, f"unexpected top-level statement: {ast.dump(node)[:80]}"
    assert public <= defined
