"""Memory preflight (ncdc/preflight.py): commands that allocate estimate first and refuse with a
typed error; the estimate bounds what the interpreter really allocates (measured with
tracemalloc, which sees numpy's allocations)."""
from __future__ import annotations

import tracemalloc

import pytest

import ncdc
from ncdc import interpreter
from ncdc.cli import main
from ncdc.preflight import (
    OVERHEAD,
    MemoryBudgetError,
    check_budget,
    estimate,
    parse_size,
)


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def spec():
    return ncdc.load()


def test_released_eval_refuses_cleanly(capsys):
    rc, out, err = run(capsys, "eval", "--preset", "released", "--size", "b=1")
    assert rc == 1 and out == ""
    assert "Traceback" not in err and "MemoryError" not in err
    assert "eval would need about" in err and "nothing was allocated" in err
    # the largest arrays, by name and shape, and how to shrink them
    assert "N-gram Table/E_{ng_{1}}.table [384006168x256]" in err
    assert "--preset medium or tiny" in err and "--size b=N" in err


def test_eval_max_memory(capsys):
    rc, _, err = run(capsys, "eval", "--block", "Shared Expert", "--max-memory", "100KiB")
    assert rc == 1 and "--max-memory 100 KiB" in err
    assert "W^{Gs}.weight" in err or "W^{Us}.weight" in err or "W^{Ds}.weight" in err
    rc, out, _ = run(capsys, "eval", "--block", "Shared Expert", "--max-memory", "2GiB")
    assert rc == 0 and "out0" in out


def test_check_max_memory(capsys):
    rc, out, err = run(capsys, "check", "--block", "Shared Expert", "--max-memory", "1MB")
    assert rc == 1 and "check would need about" in err and "1MB" not in out


def test_bad_max_memory(capsys):
    rc, _, err = run(capsys, "eval", "--max-memory", "lots")
    assert rc == 1 and "--max-memory 'lots'" in err


@pytest.mark.parametrize(("text", "value"), [
    ("1000000", 10**6), ("2GiB", 2 * 2**30), ("500MB", 500 * 10**6), ("1.5G", 3 * 2**29),
    ("64 KiB", 65536), ("3tb", 3 * 10**12)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "-1", "2 parsecs", "0", "1e9"])
def test_parse_size_rejects(text):
    with pytest.raises(ncdc.ir.errors.SpecError):
        parse_size(text)


def test_check_budget_uses_available_memory(spec):
    env = spec.bind("tiny").env
    est = estimate(spec.block("Shared Expert"), env)
    check_budget(est, command="eval", available=(est.total, "test"))  # exactly fits
    with pytest.raises(MemoryBudgetError, match="available \\(test\\)"):
        check_budget(est, command="eval", available=(est.total - 1, "test"))


def test_unbound_size_leaves_the_error_to_the_command(spec):
    env = spec.bind("released").env  # b unbound
    assert estimate(interpreter.prefix(spec.data), env) is None


def test_repetition_multiplies_parameters(spec):
    env = spec.bind("tiny").env
    sink = spec.site("Sinkhorn Round").node
    assert sink.tag.repetition == 19
    est = estimate(spec.block("Mixing Coefficients"), env)
    assert est is not None and est.total > OVERHEAD


@pytest.mark.parametrize(("preset", "sizes", "block"), [
    ("tiny", {"b": 64}, None),
    ("medium", {}, "Sliding Window Attention"),
    ("medium", {}, "Engram of Layer 1"),
    ("medium", {}, "Mixture of Experts"),
])
def test_estimate_bounds_the_measured_peak(spec, preset, sizes, block):
    env = spec.bind(preset, sizes).env
    m = spec.block(block) if block else interpreter.prefix(spec.data)
    est = estimate(m, env)
    tracemalloc.start()
    try:
        run_ = interpreter.interpret(m, env, stand_in=True, seed=0)
        inputs = interpreter.random_inputs(m, env, 0)
        run_.evaluate(*inputs, tape=interpreter.random_tape(m, env, 0))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert est.total >= peak
    if preset == "medium":  # arrays dominate: they alone bound the peak, within a factor 3
        assert peak <= est.total - OVERHEAD <= 3 * peak


def test_held_weights_count_at_their_format(spec):
    env = spec.bind("released", {"b": 4}).env
    m = spec.block("Routed Experts")
    dense = estimate(m, env)
    fp8 = estimate(m, env, held="mxfp8")
    fp4 = estimate(m, env, held=lambda p: "mxfp4" if "Routed" in p.name else None)
    bank = 5120 * 384 * 2304
    assert dense.params == 3 * bank * 8  # float64
    assert fp8.params == 3 * (bank + bank // 32)  # E4M3 + a UE8M0 per 32
    assert fp4.params == 3 * (bank // 2 + bank // 32)  # packed E2M1 + the same scales


def test_available_memory_reads_meminfo_and_cgroup(tmp_path):
    from ncdc.preflight import available_memory

    mi = tmp_path / "meminfo"
    mi.write_text("MemTotal: 100 kB\nMemAvailable:  2048 kB\n")
    got = available_memory(str(mi), str(tmp_path / "none"))
    if "psutil" not in got[1]:
        assert got == (2048 * 1024, f"MemAvailable in {mi}")
    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "memory.max").write_text("1000000\n")
    (cg / "memory.current").write_text("400000\n")
    assert available_memory(str(mi), str(cg)) == (600000, f"cgroup limit in {cg}")
    (cg / "memory.max").write_text("max\n")
    assert available_memory(str(mi), str(cg))[0] >= 0
