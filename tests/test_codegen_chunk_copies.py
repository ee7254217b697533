"""``chunked`` (codegen/prelude/chunks.py) copies a reduced-precision CPU window, chunk by
chunk, into memory of its own: a view that reads elements more than once, which CPU bfloat16
batched products would otherwise copy at every product. Within the byte budget; float32 views
and broadcast arguments pass as they are."""
from __future__ import annotations

import importlib.util

import pytest

from tests.lazy import torch


def _prelude():
    path = importlib.util.find_spec("ncdc.codegen").submodule_search_locations[0] + \
        "/prelude/chunks.py"
    spec = importlib.util.spec_from_file_location("chunks_prelude", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _window(dtype, x=40, w=8, c=16):
    """``[1, x, w, c]``: token ``i`` reads tokens ``i .. i + w - 1`` of a ``[c, x + w - 1]``
    latent buffer (a view; consecutive tokens share ``w - 1`` slots), and queries ``[h, x, c]``."""
    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(c, x + w - 1, generator=gen).to(dtype)
    win = latents.unfold(1, w, 1).permute(1, 2, 0)[None]  # [1, x, w, c], strides (., 1, 1, x+w-1)
    q = torch.randn(4, x, c, generator=gen).to(dtype)
    return q, win


def _core(seen):
    def core(q, win):
        seen.append(win)
        scores = torch.einsum("...xc,...xwc->...xw", q, win)
        return torch.einsum("...xw,...xwc->...xc", scores.softmax(-1), win)
    return core


def _distinct(t) -> bool:
    """Whether no two elements of ``t`` share memory."""
    dims = [(n, abs(s)) for n, s in zip(t.shape, t.stride(), strict=True) if n > 1]
    return 1 + sum((n - 1) * s for n, s in dims) >= t.numel()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_window_is_copied_per_chunk_within_the_budget(dtype):
    dtype = getattr(torch, dtype)
    p = _prelude()
    q, win = _window(dtype)
    assert not _distinct(win)
    want = _core([])(q.double(), win.double())
    p.CHUNK_BYTES = 10 * win.shape[2] * win.shape[3] * win.element_size()  # 10 rows of window
    seen = []
    got = p.chunked(_core(seen), q, win, dims=(-2, -3), out_dims=(-2,), width=16)
    assert len(seen) == 4 and all(_distinct(s) for s in seen)
    assert all(s.numel() * s.element_size() <= p.CHUNK_BYTES for s in seen)
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)
    for s, start in zip(seen, range(0, 40, 10), strict=True):  # the very values of the window
        assert torch.equal(s, win.narrow(1, start, 10))


def test_a_float32_window_and_a_broadcast_pass_as_views():
    p = _prelude()
    q, win = _window(torch.float32)
    seen = []
    p.chunked(_core(seen), q, win, dims=(-2, -3), out_dims=(-2,), width=16)
    assert len(seen) == 1 and seen[0] is win  # one chunk, the view itself
    qb, wb = _window(torch.bfloat16)
    wide = wb.expand(3, *wb.shape[1:])  # a broadcast dim: a copy would materialise it
    seen = []
    p.chunked(_core(seen), qb[:, None].expand(4, 3, 40, 16), wide, dims=(-2, -3),
              out_dims=(-2,), width=16)
    assert seen[0].stride(0) == 0
