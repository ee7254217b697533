"""Collecting the suite is cheap: ``pytest --collect-only`` in a fresh interpreter imports none
of torch, ml_dtypes, transformers or safetensors (test modules take them from
:mod:`tests.lazy`, the library binds torch with :func:`ncdc.ir.lazy.lazy_module`), and a
collection with bytecode at hand stays within a CPU-time bound.

A first collection compiles every module and has pytest rewrite the 2,500 asserts of the test
modules (a fresh clone's first run); later ones read the bytecode. The test collects once, and
where that took longer than the bound (bytecode was not yet written) once more, and bounds the
last: the collection a developer waits for. Where ``PYTHONDONTWRITEBYTECODE`` is set, nothing
would be kept, so the bytecode goes to a private ``PYTHONPYCACHEPREFIX``. Measured on the
2-core machine with pytest 9.2 (CPU seconds of the collecting process): 7.0-7.4 s for a first
collection (10.9 s with a prefix that holds not even the site packages' bytecode), 2.7-2.9 s
with bytecode. CI's machine took 10.7 s for a first one, so a bound on it would measure the
machine; the bound leaves that factor of headroom, and importing torch and transformers (4-6 s
more) still exceeds it, besides failing the import check.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ml_dtypes", "transformers", "safetensors")
WARM_CPU_BOUND_S = 6.0

SCRIPT = f"""
import sys
import pytest
rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"])
print("HEAVY", [m for m in {HEAVY!r} if m in sys.modules])
sys.exit(rc)
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _collect(env: dict[str, str]) -> tuple[list[str], float]:
    before = _children_cpu()
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT,
                       env=env, timeout=300, check=False)
    cpu = _children_cpu() - before
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return [line for line in r.stdout.splitlines() if line.startswith("HEAVY ")], cpu


@pytest.mark.slow
def test_collecting_the_suite_imports_nothing_heavy_and_is_cheap(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    if env.pop("PYTHONDONTWRITEBYTECODE", None):
        env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pycache")
    heavy, cpu = _collect(env)
    assert heavy == ["HEAVY []"], heavy
    if cpu >= WARM_CPU_BOUND_S:  # a first collection: the bytecode is written now
        heavy, cpu = _collect(env)
        assert heavy == ["HEAVY []"], heavy
    assert cpu < WARM_CPU_BOUND_S, f"collection with bytecode took {cpu:.1f} s of CPU"
