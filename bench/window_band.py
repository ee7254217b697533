"""The window attention's two products three ways: ``torch.einsum`` over the window view, over a
copy of it (what generated code did before ``band_einsum``: CPU 16-bit batched products copy an
overlapping operand anyway), and the prelude's ``band_einsum`` (codegen/prelude/views.py: one
product per block of ``w`` queries against the ``2w - 1`` source rows it reads), which the
generated Attention Core calls; it takes the block path in 16 bits on the CPU only.

Prints, per dtype and token count, the time of both products each way (min / median over
interleaved rounds, torch pinned to one thread) and the relative error of ``band_einsum``
against float64.

    python bench/window_band.py [--heads 8] [--width 128] [--window 128] [--tokens 1,256,1024]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from ncdc.codegen.prelude.views import band_einsum

SCORES, SUMS = '...xc,...xwc->...xw', '...xw,...xwc->...xc'
"""The Attention Core's two products over the window: the scores, and the weighted sums."""


def window_view(source, w):
    """``[1, x, w, c]``: ``(x, j)`` reads row ``x + j`` of ``source`` padded by ``w - 1`` zero
    rows in front, the view the generated layer reads."""
    return F.pad(source, (0, 0, w - 1, 0)).unfold(0, w, 1).transpose(-2, -1)[None]


def runs(q, p, window):
    """Both products, each way."""
    def copied():
        whole = window.contiguous()
        return torch.einsum(SCORES, q, whole), torch.einsum(SUMS, p, whole)
    return {"einsum": lambda: (torch.einsum(SCORES, q, window), torch.einsum(SUMS, p, window)),
            "copy": copied,
            "band": lambda: (band_einsum(SCORES, q, window, "x", "w"),
                             band_einsum(SUMS, p, window, "x", "w"))}


def _time(fns, repeat):
    times = {k: [] for k in fns}
    for _ in range(repeat):
        for k, f in fns.items():  # interleaved
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: (min(v) * 1e3, statistics.median(v) * 1e3) for k, v in times.items()}


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
          f"min / median of {args.repeat} interleaved rounds, ms")
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
                errors.append(float((band_einsum(eq, a, win, "x", "w").double() - want).abs().max()
                                    / want.abs().max()))
            t = _time(runs(q, p, win), args.repeat)
            cells = "  ".join(f"{k} {lo:7.2f} / {med:7.2f}" for k, (lo, med) in t.items())
            print(f"{str(dtype)[6:]:>8} x {x:>5}: {cells}  band/copy {t['band'][0] / t['copy'][0]:.2f}"
                  f"  (band relative error {errors[0]:.1e}, {errors[1]:.1e})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
