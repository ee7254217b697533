"""``tests.lazy``: a module named there is bound at once and loaded on first attribute access,
as one module object shared with a later ``import``. Checked in a fresh interpreter (this one
has torch loaded already)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import sys
from tests.lazy import ml_dtypes
print(type(sys.modules["ml_dtypes"]).__name__)
import ml_dtypes as again
import numpy as np
value = np.float64(1.5).astype(ml_dtypes.bfloat16)
print(again is ml_dtypes, type(sys.modules["ml_dtypes"]).__name__, float(value))
"""


def test_a_lazy_module_loads_on_first_use_as_one_module():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                       cwd=ROOT, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["_LazyModule", "True", "module", "1.5"]


def test_an_unknown_name_is_an_attribute_error():
    import pytest

    import tests.lazy

    with pytest.raises(AttributeError):
        tests.lazy.sympy  # noqa: B018 - only the names of LAZY
