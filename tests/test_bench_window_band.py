"""bench/window_band.py: its three ways of computing the window products give the same values
(the band way is checked against a hand-written loop in test_codegen_band.py), and one small
run prints a row per dtype and token count."""
from __future__ import annotations

from tests.bench_scripts import load_bench
from tests.lazy import torch


def test_the_three_ways_agree_and_a_small_run_prints(capsys):
    band = load_bench("window_band")
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        source, q, p = torch.randn(13, 5), torch.randn(3, 13, 5), torch.randn(3, 13, 4)
        got = {k: f() for k, f in band.runs(q.to(dtype), p.to(dtype),
                                            band.window_view(source.to(dtype), 4)).items()}
        for k in ("copy", "band"):
            for a, b in zip(got[k], got["einsum"], strict=True):
                torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol)
    assert band.main(["--heads", "2", "--width", "8", "--window", "4", "--tokens", "3,9",
                      "--repeat", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if " x " in line]
    assert len(rows) == 4 and all("band/copy" in r for r in rows)
