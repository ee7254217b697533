"""``band_einsum`` (codegen/prelude/views.py): a contraction over a window read (a band view:
entry ``(x, w)`` reads source row ``x + w``) in 16 bits on the CPU is computed as one product per
block of ``w`` rows against the rows the block reads. Checked against a hand-written loop over
queries and window slots on values bfloat16 holds exactly (small integers, so every product
and sum is exact), at token counts that fill whole blocks, part of one, and fewer than a
window; the block path must be the one that ran (past one row). Elsewhere (float32, a copy of the window, a
traced call) it is ``torch.einsum``. ``chunked`` passes the window to it as a view."""
from __future__ import annotations

import importlib
from unittest import mock

import numpy as np
import pytest

from tests.lazy import torch

SCORES, SUMS = "...xc,...xwc->...xw", "...xw,...xwc->...xc"


def _prelude(name):
    return importlib.import_module(f"ncdc.codegen.prelude.{name}")


def _window(source, w):
    """``[1, x, w, c]``: ``(t, j)`` reads row ``t + j`` of ``source`` with ``w - 1`` zero rows in
    front (token ``t - (w - 1) + j``), as ``affine_read(..., flip=False)`` gives it: a view."""
    padded = torch.cat([source.new_zeros(w - 1, source.shape[1]), source])
    return padded.unfold(0, w, 1).transpose(-2, -1)[None]


def _einsums(views):
    """Record every equation ``torch.einsum`` is called with, and compute it."""
    seen, real = [], torch.einsum

    def spy(eq, *args):
        seen.append(eq)
        return real(eq, *args)
    return seen, mock.patch.object(views.torch, "einsum", spy)


@pytest.mark.parametrize("x", [1, 3, 8, 13])
def test_band_products_match_a_loop(x):
    views = _prelude("views")
    h, c, w = 3, 5, 4
    rng = np.random.default_rng(x)
    source, q, p = (rng.integers(-2, 3, shape).astype(np.float64)
                    for shape in ((x, c), (h, x, c), (h, x, w)))
    padded = np.concatenate([np.zeros((w - 1, c)), source])
    scores, sums = np.zeros((h, x, w)), np.zeros((h, x, c))
    for i in range(h):
        for t in range(x):
            for j in range(w):
                scores[i, t, j] = q[i, t] @ padded[t + j]
                sums[i, t] += p[i, t, j] * padded[t + j]
    bf = [torch.from_numpy(v).to(torch.bfloat16) for v in (source, q, p)]
    win = _window(bf[0], w)
    seen, spy = _einsums(views)
    with spy:
        got_scores = views.band_einsum(SCORES, bf[1], win, "x", "w")
        got_sums = views.band_einsum(SUMS, bf[2], win, "x", "w")
    # the block products ran (one row: its product is already one, the einsum's)
    assert len(seen) == 2 and all(("B" in eq) == (x > 1) for eq in seen), seen
    np.testing.assert_array_equal(got_scores.double().numpy(), scores)
    np.testing.assert_array_equal(got_sums.double().numpy(), sums)


def test_elsewhere_it_is_the_einsum():
    views = _prelude("views")
    source, q = torch.randn(6, 5), torch.randn(2, 6, 5)
    for a, win in ((q, _window(source, 4)),  # float32
                   (q.bfloat16(), _window(source.bfloat16(), 4).contiguous())):  # no band
        seen, spy = _einsums(views)
        with spy:
            got = views.band_einsum(SCORES, a, win, "x", "w")
        assert seen == [SCORES] and torch.equal(got, torch.einsum(SCORES, a, win))
    compiled = torch.compile(lambda a, b: views.band_einsum(SCORES, a, b, "x", "w"),
                             fullgraph=True, backend="eager")
    a, win = q.bfloat16(), _window(source.bfloat16(), 4)
    torch.testing.assert_close(compiled(a, win), torch.einsum(SCORES, a, win))


def test_chunks_pass_the_window_as_a_view(monkeypatch):
    """Each chunk of a bfloat16 window is a slice of the window itself (the band products
    read it so), within the byte budget, and the chunked result is the whole one."""
    chunks, views = _prelude("chunks"), _prelude("views")
    source, q = torch.randn(40, 16).bfloat16(), torch.randn(4, 40, 16).bfloat16()
    win = _window(source, 8)
    seen = []

    def core(q, win):
        seen.append(win)
        scores = views.band_einsum(SCORES, q, win, "x", "w")
        return views.band_einsum(SUMS, scores.softmax(-1), win, "x", "w")
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 10 * 4 * 16 * 2)  # 10 rows of [4, x, 16]
    got = chunks.chunked(core, q, win, dims=(-2, -3), out_dims=(-2,), width=16)
    assert len(seen) == 4 and all(s.data_ptr() == win.narrow(1, 10 * i, 10).data_ptr()
                                  and s.stride() == win.stride() for i, s in enumerate(seen))
    want = torch.einsum(SUMS, torch.einsum(SCORES, q.double(), win.double()).softmax(-1),
                        win.double())
    torch.testing.assert_close(got.double(), want, rtol=3e-2, atol=3e-2)
