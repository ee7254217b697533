"""Code habits the repository keeps: ruff (pyproject's rule set, complexity at most 15) passes on
the whole tree, and mypy passes on ``ncdc.ir`` and ``ncdc.spec``."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_passes_on_the_tree():
    exe = shutil.which("ruff")
    if exe is None:
        pytest.skip("ruff is not installed")
    r = subprocess.run([exe, "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def _ncdc_layout(where: Path) -> Path:
    """A folder where ``ncdc.ir`` and ``ncdc.spec`` are the repository's ``ir/`` and ``spec/``
    (the package-dir mapping of pyproject, which mypy cannot read from an editable install)."""
    pkg = where / "ncdc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in ("ir", "spec"):
        os.symlink(ROOT / name, pkg / name, target_is_directory=True)
    return where


def test_mypy_passes_on_ir_and_spec(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")
    where = _ncdc_layout(tmp_path)
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / ".mypy_cache"), "-p", "ncdc.ir", "-p", "ncdc.spec"],
        cwd=where, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout
