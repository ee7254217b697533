"""The window attention's two products as banded matrix products, against the einsums the
generated Attention Core runs today (a measurement for issue 26, not code ncdc generates).

The window a generated layer reads is a view: position ``(x, j)`` of ``[..., x, w, c]`` reads
row ``x + j`` of the zero-padded source (``affine_read(..., flip=False)``), so the strides of
``x`` and ``w`` are equal. The scores ``einsum('...xc,...xwc->...xw')`` and the sums
``einsum('...xw,...xwc->...xc')`` can then run block by block: ``w`` queries against the
``2w - 1`` source rows their windows cover, one matrix product per block, the band taken as a
strided view (scores) or laid on zeros (sums). That is about twice the FLOPs, in products
instead of per-query vector products over an overlapping view.

Prints, per dtype and token count, the relative error of both against float64 and the time of
both pairs of products: min / median over interleaved rounds, torch pinned to one thread.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def band_rows(window):
    """The source rows ``[..., x + w - 1, c]`` a band view ``[..., x, w, c]`` reads (broadcast
    leading dims kept at size 1), or None where ``window`` is not such a view."""
    *lead, n, w, c = window.shape
    *lead_strides, sx, sw, sc = window.stride()
    if sx != sw or sx <= 0:
        return None
    lead = [1 if s == 0 else m for m, s in zip(lead, lead_strides, strict=True)]
    return window.as_strided((*lead, n + w - 1, c), (*lead_strides, sx, sc),
                             window.storage_offset())


def _band_blocks(window):
    """``(blocks, n, w, nb)`` for a band view ``window [..., n, w, c]``: the rows it reads,
    zero-padded to whole blocks and viewed as ``nb`` overlapping blocks ``[nb, 2w - 1, c]`` of
    ``2w - 1`` rows each (leading dims of the window broadcast); None where it is no band."""
    rows = band_rows(window)
    if rows is None or any(m != 1 for m in rows.shape[:-2]):
        return None
    n, w = window.shape[-3], window.shape[-2]
    nb = -(-n // w)
    rows = F.pad(rows, (0, 0, 0, nb * w - n))
    st = rows.stride()
    blocks = rows.as_strided((*rows.shape[:-2], nb, 2 * w - 1, rows.shape[-1]),
                             (*st[:-2], w * st[-2], st[-2], st[-1]))
    return blocks.reshape(nb, 2 * w - 1, -1), n, w, nb


def _band_of(full, w):
    """The band ``[..., w]`` of ``full [..., w, 2w - 1]``: entry ``(i, j)`` at ``(i, i + j)``."""
    st = full.stride()
    return full.as_strided((*full.shape[:-1], w), (*st[:-2], st[-2] + st[-1], st[-1]),
                           full.storage_offset())


def _folded(t, n, w, nb):
    """``t [L..., n, k]`` padded to ``nb`` blocks of ``w`` rows, as ``[nb, L * w, k]``: each
    block's rows at every leading index, one matrix per block."""
    blocked = F.pad(t, (0, 0, 0, nb * w - n)).unflatten(-2, (nb, w))
    return blocked.reshape(-1, nb, w, t.shape[-1]).transpose(0, 1).reshape(nb, -1, t.shape[-1])


def _unfolded(t, lead, n, w):
    """The inverse of :func:`_folded`: ``[nb, L * w, k]`` as ``[*lead, n, k]``."""
    k = t.shape[-1]
    return t.view(t.shape[0], -1, w, k).transpose(0, 1).reshape(*lead, -1, k)[..., :n, :]


SCORES, SUMS = '...xc,...xwc->...xw', '...xw,...xwc->...xc'
"""The Attention Core's two products over the window: the scores, and the weighted sums."""


def window_product(equation, a, window):
    """``torch.einsum(equation, a, window)`` for :data:`SCORES` or :data:`SUMS` over a band view
    ``window`` shared by every leading index of ``a``, as one matrix product per block."""
    found = _band_blocks(window)
    if found is None:
        return torch.einsum(equation, a, window)
    blocks, n, w, nb = found
    if equation == SCORES:
        full = torch.matmul(_folded(a, n, w, nb), blocks.transpose(-2, -1))  # [nb, L*w, 2w-1]
        band = _band_of(full.view(nb, -1, w, 2 * w - 1), w)
        return _unfolded(band.reshape(nb, -1, w), a.shape[:-2], n, w)
    full = a.new_zeros(nb, a.shape[:-2].numel() * w, 2 * w - 1)
    _band_of(full.view(nb, -1, w, 2 * w - 1), w).copy_(_folded(a, n, w, nb).view(nb, -1, w, w))
    return _unfolded(torch.matmul(full, blocks), a.shape[:-2], n, w)


def window_view(source, w):
    """``[1, x, w, c]``: ``(x, j)`` reads row ``x + j`` of ``source`` padded by ``w - 1`` zero
    rows in front, the view the generated layer reads."""
    return F.pad(source, (0, 0, w - 1, 0)).unfold(0, w, 1).transpose(-2, -1)[None]


def _time(fns, repeat):
    times = {k: [] for k in fns}
    for _ in range(repeat):
        for k, f in fns.items():  # interleaved
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: (min(v) * 1e3, statistics.median(v) * 1e3) for k, v in times.items()}


def _runs(q, p, window):
    """Both products, each way."""
    return {"einsum": lambda: (torch.einsum(SCORES, q, window), torch.einsum(SUMS, p, window)),
            "banded": lambda: (window_product(SCORES, q, window),
                               window_product(SUMS, p, window))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--width", type=int, default=128, help="latent width c")
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--tokens", default="1,256,1024")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    h, c, w = args.heads, args.width, args.window
    print(f"window products: h {h}, c {c}, w {w}; torch {torch.__version__}, 1 thread; "
          f"min / median of {args.repeat} interleaved rounds")
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for x in (int(t) for t in args.tokens.split(",")):
            source = torch.randn(x, c, generator=gen).to(dtype)
            q = torch.randn(h, x, c, generator=gen).to(dtype)
            p = torch.randn(h, x, w, generator=gen).to(dtype)
            win = window_view(source, w)
            errors = []
            for eq, a in ((SCORES, q), (SUMS, p)):
                want = torch.einsum(eq, a.double(), win.double())
                errors.append(float((window_product(eq, a, win).double() - want).abs().max()
                                    / want.abs().max()))
            t = _time(_runs(q, p, win), args.repeat)
            print(f"{str(dtype)[6:]:>8} x {x:>5}: einsum {t['einsum'][0]:7.2f} / "
                  f"{t['einsum'][1]:7.2f} ms  banded {t['banded'][0]:7.2f} / "
                  f"{t['banded'][1]:7.2f} ms  banded/einsum {t['banded'][0] / t['einsum'][0]:.2f}"
                  f"  (relative error {errors[0]:.1e}, {errors[1]:.1e})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
