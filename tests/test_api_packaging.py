"""Packaging: the wheel installs one top-level package, `ncdc`, with every module and data file
of the design's folders; runtime dependencies are what the runtime imports; licence metadata."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"ncdc": "ncdc", "spec": "ncdc/spec", "ir": "ncdc/ir",
           "interpreter": "ncdc/interpreter", "codegen": "ncdc/codegen"}
RUNTIME = ("ncdc", "spec", "ir", "interpreter", "codegen")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _imported_top_levels(folder: Path) -> set[str]:
    names = set()
    for f in folder.rglob("*.py"):
        for m in re.finditer(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", f.read_text("utf-8"),
                             re.MULTILINE):
            names.add(m.group(1))
    return names


def test_runtime_dependencies_are_what_the_runtime_imports():
    project = _pyproject()["project"]
    deps = {re.split(r"[<>=!~ ]", d)[0].lower().replace("-", "_") for d in
            project["dependencies"]}
    imported = set().union(*(_imported_top_levels(ROOT / f) for f in RUNTIME))
    # ml_dtypes encodes weights held in FP8/FP4 storage formats (interpreter/storage_policy.py)
    assert "ml_dtypes" in imported and "ml_dtypes" in deps
    for dep in deps:
        assert dep in imported, f"{dep} is a runtime dependency nothing imports"
    third_party = {"numpy", "sympy", "networkx", "torch", "safetensors", "ml_dtypes"}
    assert third_party & imported <= deps


def test_licence_and_metadata():
    project = _pyproject()["project"]
    assert project["license"] == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT")
    assert any(c.startswith("Programming Language :: Python :: 3") for c in
               project["classifiers"])
    assert project["urls"] and all(u.startswith("https://") for u in project["urls"].values())


@pytest.mark.slow
def test_wheel_has_one_top_level_package(tmp_path):
    """Builds the wheel from a copy of the tree (no build output lands in the checkout)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, src / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps",
                        "--no-build-isolation", "-w", str(tmp_path / "dist"), "-q"],
                       cwd=src, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp_path / "dist").glob("ncdc-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"ncdc"}
    assert not any(n.startswith("ncdc/tests/") for n in names)
    # every module and data file of the design's folders is in it, under ncdc/
    for folder, target in FOLDERS.items():
        for f in (ROOT / folder).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".json"):
                assert f"{target}/{f.relative_to(ROOT / folder).as_posix()}" in names, f
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "License-Expression: MIT" in text and "Requires-Dist: ml_dtypes" in text
    assert re.search(r"^Requires-Dist: ml_dtypes>=[0-9.]+$", text, re.MULTILINE)
