"""A slice of the fuzz campaign (``bench/fuzz.py``; the full campaign is the bench): mutated
specs through every CLI command and the public API (the bundled spec among them), hostile
checkpoint maps and checkpoints, and ``ncdc view`` pages in Chromium, run as the bench runs
them (recycled workers under CPU and memory limits). The bench exits 0 only with no untyped
exception, no hang and no run over its memory limit."""
from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import fuzz
from bench.fuzz_view import chromium

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _int_digits():
    """The campaign's case writer lifts Python's limit on integer digits (it writes long
    literals); other tests rely on the limit, so it is restored."""
    limit = sys.get_int_max_str_digits()
    yield
    sys.set_int_max_str_digits(limit)


def test_the_cases_reach_every_entry_point():
    """The case mix (from case numbers alone) covers every command, the API calls, the
    bundled spec and map cases."""
    import tempfile

    docs = fuzz._load_docs((*fuzz.SPECS, fuzz.BUNDLED))
    seen, bundled = set(), 0
    with tempfile.TemporaryDirectory() as d:
        for n in range(400):
            argv, what = fuzz.make_case(n, Path(d), docs)
            seen.add(argv[0] if argv[0] != "api" else f"api {argv[1]}")
            bundled += what.startswith(fuzz.BUNDLED.name)
        argv, what = fuzz.make_case(fuzz.MAP_BASE + 3, Path(d), docs)
    from ncdc.cli import COMMANDS

    assert set(COMMANDS) <= seen
    assert {f"api {c}" for c in fuzz.API_CALLS} <= seen
    assert bundled > 0
    assert "--map" in argv and what.startswith("map: ")


def test_text_mutations_of_the_bundled_spec_change_it():
    text = fuzz.BUNDLED.read_text(encoding="utf-8")
    for n in range(20):
        mutated, how = fuzz.mutate_text(text, random.Random(n))
        assert mutated != text, how


@pytest.mark.slow
def test_a_slice_of_the_campaign_finds_nothing():
    views = 2 if chromium() is not None else 0
    start = 20_000                          # a fixed slice: the same cases every run
    cmd = [sys.executable, str(ROOT / "bench" / "fuzz.py"), "-n", "120", "--maps", "30",
           "--view", str(views), "-j", "1", "--start", str(start)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT,
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"--start {start}:\n{out[-4000:]}"
    assert re.search(r"^untyped exceptions: 0$", out, re.M), out[-2000:]
    assert re.search(r"^hangs over .*: 0$", out, re.M), out[-2000:]
    assert re.search(r"^runs over 2 GB: 0$", out, re.M), out[-2000:]
    assert "map/checkpoint cases: 30, untyped 0, hangs 0" in out


def test_a_cost_formula_with_a_dotted_name_is_shown_as_text():
    """A finding of the campaign (``ncdc cost`` of a spec whose size is named ``x.y``): the
    formula sympy cannot read back is printed as text, not a traceback."""
    from ncdc.commands.cost_report import _si

    assert _si("2*x.y*k") == "2*x.y*k"
    assert _si("3000*k") == "3 k*k"            # a formula sympy reads: its leading term


def test_a_complex_size_is_shown_as_text_by_cost():
    """A finding of the campaign (``ncdc cost`` of a spec whose size evaluates to a complex
    number): the value is printed as text, not a traceback."""
    import sympy

    from ncdc.commands.cost_report import _value
    from ncdc.ir.env import Env

    assert _value(sympy.sqrt(-4), Env()) == "2*I"
    assert _value(sympy.Integer(3) / 2, Env()) == 1.5
