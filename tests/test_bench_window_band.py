"""bench/window_band.py: its banded window products are the einsums they time, checked
against a hand-written float64 loop over queries and window slots, at token counts that fill
whole blocks, a part of one, and fewer than a window; a view that is not a band falls back."""
from __future__ import annotations

import numpy as np
import pytest

from tests.bench_scripts import load_bench
from tests.lazy import torch


@pytest.fixture(scope="module")
def band():
    return load_bench("window_band")


@pytest.mark.parametrize("x", [1, 3, 8, 13])
def test_banded_products_match_a_loop(band, x):
    h, c, w = 3, 5, 4
    rng = np.random.default_rng(x)
    source, q, p = rng.standard_normal((x, c)), rng.standard_normal((h, x, c)), \
        rng.standard_normal((h, x, w))
    padded = np.concatenate([np.zeros((w - 1, c)), source])
    scores, sums = np.zeros((h, x, w)), np.zeros((h, x, c))
    for i in range(h):
        for t in range(x):
            for j in range(w):  # (t, j) reads padded row t + j: token t - (w - 1) + j
                scores[i, t, j] = q[i, t] @ padded[t + j]
                sums[i, t] += p[i, t, j] * padded[t + j]
    win = band.window_view(torch.from_numpy(source), w)
    assert band.band_rows(win) is not None and band._band_blocks(win) is not None  # no fallback
    np.testing.assert_allclose(band.window_product(band.SCORES, torch.from_numpy(q), win).numpy(), scores,
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(band.window_product(band.SUMS, torch.from_numpy(p), win).numpy(), sums,
                               rtol=1e-12, atol=1e-12)


def test_a_copy_of_the_window_is_no_band(band):
    win = band.window_view(torch.randn(6, 5, dtype=torch.float64), 4).contiguous()
    assert band.band_rows(win) is None
    q = torch.randn(2, 6, 5, dtype=torch.float64)
    torch.testing.assert_close(band.window_product(band.SCORES, q, win),
                               torch.einsum('...xc,...xwc->...xw', q, win))
