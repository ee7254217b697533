"""Collecting the suite is cheap: ``pytest --collect-only`` in a fresh interpreter imports none
of torch, ml_dtypes, transformers or safetensors (test modules take them from
:mod:`tests.lazy`, the library binds torch with :func:`ncdc.ir.lazy.lazy_module`), and it stays
within a CPU-time bound.

Measured on the 2-core machine with pytest 9.2 (CPU seconds of the collecting process, the
whole suite): 7.0-7.4 s without bytecode (``PYTHONDONTWRITEBYTECODE=1`` and no ``__pycache__``,
as a fresh clone's first run: pytest rewrites the 2,500 asserts of every test module anew, about
half of it), 2.6-2.8 s with it. CPU time, not wall time, so that a loaded machine does not make
the bound flaky; the bound leaves headroom over the slower of the two, and an import of torch
and transformers (4-6 s more) still exceeds it.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ml_dtypes", "transformers", "safetensors")
CPU_BOUND_S = 10.0

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


def test_collecting_the_suite_imports_nothing_heavy_and_is_cheap():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    before = _children_cpu()
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT,
                       env=env, timeout=300, check=False)
    cpu = _children_cpu() - before
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    heavy = [line for line in r.stdout.splitlines() if line.startswith("HEAVY ")]
    assert heavy == ["HEAVY []"], heavy
    assert cpu < CPU_BOUND_S, f"collection took {cpu:.1f} s of CPU"
