"""The scripts of ``bench/`` as modules, for the tests that run them at small sizes (they are
scripts, not a package: each is loaded from its file, once per process)."""
from __future__ import annotations

import functools
import importlib.util
import pathlib
import types

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"


@functools.cache
def load_bench(name: str) -> types.ModuleType:
    """``bench/<name>.py`` loaded as the module ``bench_<name>``."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
