"""``tests.lazy`` and :func:`ncdc.ir.lazy.lazy_module`: a module named there is bound at once and
imported on first use; probing the name as pytest does while collecting imports nothing.
Checked in a fresh interpreter (this one has torch loaded already)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import inspect, sys
from tests.lazy import F, ml_dtypes
from _pytest.compat import safe_getattr, safe_isclass
from _pytest.fixtures import getfixturemarker
# what pytest does to every global of a module it collects
probes = (safe_isclass(ml_dtypes), inspect.isclass(F), getfixturemarker(ml_dtypes),
          getfixturemarker(F), safe_getattr(ml_dtypes, "__test__", None), ml_dtypes.__name__)
print("ml_dtypes" in sys.modules, "torch" in sys.modules, probes)
import numpy as np
value = np.float64(1.5).astype(ml_dtypes.bfloat16)
import ml_dtypes as real
print(real.bfloat16 is ml_dtypes.bfloat16, sys.modules["ml_dtypes"] is real, float(value))
"""


def test_a_lazy_module_imports_on_first_use_not_when_probed():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                       cwd=ROOT, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert first == "False False (False, False, None, None, None, 'ml_dtypes')"
    assert second == "True True 1.5"


def test_a_lazy_module_sets_and_deletes_on_the_real_one():
    from ncdc.ir.lazy import LazyModule

    fake = LazyModule("tests.oracles")
    fake.marker_of_this_test = 1
    import tests.oracles as real

    assert real.marker_of_this_test == 1 and fake.marker_of_this_test == 1
    del fake.marker_of_this_test
    assert not hasattr(real, "marker_of_this_test")


def test_an_unknown_name_is_an_attribute_error():
    import pytest

    import tests.lazy

    with pytest.raises(AttributeError):
        tests.lazy.sympy  # noqa: B018 - only the names of LAZY and DEFERRED
    with pytest.raises(ModuleNotFoundError):
        tests.lazy.lazy_module("no_such_module_here")
