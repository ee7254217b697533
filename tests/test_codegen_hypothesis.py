"""Generated modules against the interpreter at sizes drawn by hypothesis (tiny, varied
consistently with docs/format.md §4.5), in both modes."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ncdc.verify.check import check_morphism

SETTINGS = settings(max_examples=6, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _check(bundled, title, sizes, quant):
    env = bundled.bind("tiny", sizes=sizes).env
    r = check_morphism(bundled.block(title), env, name=title, quant=quant)
    assert r.ok, f"{title} at {sizes} ({quant}): {r.problem}"


QUANT = st.sampled_from(["exact", "emulate"])


@pytest.mark.slow
@SETTINGS
@given(n=st.integers(1, 5), m=st.integers(1, 24), quant=QUANT)
def test_mixing_coefficients(bundled, n, m, quant):
    _check(bundled, "Mixing Coefficients", {"n": n, "m": m}, quant)


@pytest.mark.slow
@SETTINGS
@given(b=st.integers(1, 6), w=st.integers(1, 12), c=st.integers(1, 16), quant=QUANT)
def test_attention_core(bundled, b, w, c, quant):
    """Window longer or shorter than the sequence; dead slots before the first token."""
    _check(bundled, "Attention Core", {"b": b, "w": w, "c": c}, quant)


@SETTINGS
@given(b=st.integers(1, 5), t=st.integers(1, 6), extra=st.integers(0, 6), quant=QUANT)
def test_rotary_embedding(bundled, b, t, extra, quant):
    _check(bundled, "Rotary Embedding", {"b": b, "t": t, "c": 2 * t + extra}, quant)


@pytest.mark.slow
@SETTINGS
@given(groups=st.integers(1, 3), width=st.integers(1, 8), quant=QUANT)
def test_fp8_round_trip(bundled, groups, width, quant):
    sizes = {"\\tilde{E}": groups, "\\hat{y}": width, "c": groups * width}
    _check(bundled, "FP8 Round Trip of a Window Latent", sizes, quant)


@pytest.mark.slow
@SETTINGS
@given(e=st.integers(1, 10), k=st.integers(1, 10), m=st.integers(1, 12), quant=QUANT)
def test_expert_gate(bundled, e, k, m, quant):
    _check(bundled, "Expert Gate", {"e": e, "k": min(k, e), "m": m}, quant)


@pytest.mark.slow
@pytest.mark.parametrize("b", [1, 2, 5])
def test_engram_at_token_counts(bundled, b):
    """The look-back windows (L|x, L'|G, GK'|GK) at sequences shorter than the window."""
    _check(bundled, "Engram of Layer 1", {"b": b}, "exact")
