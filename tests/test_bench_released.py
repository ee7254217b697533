"""bench/released.py at tiny sizes: every phase runs, the stored state equals the cost model's
bytes under the policy, and the check against the interpreter passes (and can fail)."""
from __future__ import annotations

import re

import pytest

from tests.bench_scripts import load_bench
from tests.lazy import torch


@pytest.fixture(scope="module")
def released():
    return load_bench("released")


@pytest.mark.slow
@pytest.mark.parametrize("experts", ["mxfp4", "mxfp8"])
def test_tiny_run_checks_out(released, capsys, experts):
    threads = torch.get_num_threads()
    try:
        assert released.main(["--preset", "tiny", "--experts", experts, "--check",
                              "--threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    for phase in ("generate", "build on meta", "to_empty", "reset_parameters",
                  "forward (bfloat16)", "check attention half", "check MoE per token"):
        assert re.search(rf"{re.escape(phase)}\s+[0-9.]+ s\s+peak RSS", out), phase
    stored, model = re.search(r"stored state: (.+) \(cost model (.+)\)", out).groups()
    assert stored == model
    assert "outputs finite: True" in out and "check: ok" in out
    rel = [float(v) for v in re.findall(r"max rel ([0-9.e+-]+)", out)]
    assert len(rel) == 2 and max(rel) < 1e-12


@pytest.mark.slow
def test_the_moe_check_sees_a_wrong_expert(released, monkeypatch):
    """A corrupted slice of one routed expert makes the per-token MoE check fail."""
    real = released.expert_slice

    def corrupt(model, g, name, chosen):
        value = real(model, g, name, chosen)
        return value * 1.5 if "W^{D}" in g.param_keys[name] else value

    monkeypatch.setattr(released, "expert_slice", corrupt)
    threads = torch.get_num_threads()
    try:
        assert released.main(["--preset", "tiny", "--check", "--threads", "1"]) == 1
    finally:
        torch.set_num_threads(threads)
