"""Shared helpers of the oracles and their tests."""
from __future__ import annotations

import numpy as np

from tests.lazy import ml_dtypes


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def rms_normalise(x, eps, axes=(-1,)):
    """x / sqrt(mean(x^2) + eps) over ``axes`` jointly."""
    return x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + eps)


def bf16(x):
    """Round to bfloat16 with ml_dtypes (RNE) and back to float64."""
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def e4m3(x):
    """Round to float8_e4m3fn with ml_dtypes (RNE) and back to float64."""
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)


def random_params(specs, env, seed, base=None):
    """Non-trivial random parameters for oracle tests: weights N(0, 1/fan_in), biases and
    input-less arrays N(0, 0.5^2), gains 1 + N(0, 0.1^2), real tables N(0, 1); arrays that are
    not learned (fixed arrays, user data) are taken from ``base``."""
    rng = np.random.default_rng(seed)
    out = {}
    for p in specs:
        shape = tuple(env.size(s) for s in p.shape)
        if not p.learned:
            out[p.key] = base[p.key]
        elif p.role == "weight" and p.site.input_weaves:
            fan_in = int(np.prod([env.size(a.size) for w in p.site.input_weaves
                                  for a in w.target]))
            out[p.key] = rng.standard_normal(shape) / np.sqrt(fan_in)
        elif p.role == "gain":
            out[p.key] = 1.0 + 0.1 * rng.standard_normal(shape)
        elif p.role == "table":
            out[p.key] = rng.standard_normal(shape)
        else:
            out[p.key] = 0.5 * rng.standard_normal(shape)
    return out


def assert_close(got, want, rtol=1e-10, what=""):
    """Relative agreement, scaled by the largest magnitude of ``want`` (so near-zero entries do
    not demand digits the computation never had)."""
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    scale = max(float(np.max(np.abs(want))), 1e-300) if want.size else 1.0
    err = float(np.max(np.abs(got - want))) / scale if want.size else 0.0
    assert err <= rtol, f"{what}: max relative error {err:.3g} > {rtol:g}"
