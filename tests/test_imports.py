"""Imports match the map: one import name per module, no import circles.

The design's folders (``ir/``, ``spec/``, ...) install as ``ncdc.ir``, ``ncdc.spec``, ...; a
module reachable under a second name (the bare ``ir``) would be loaded twice, and its classes
would exist as two class objects that ``isinstance`` tells apart. The import graph is read from
the AST (:mod:`tests.import_graph`), so an import inside a function counts as much as one at the
top of a module.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.import_graph import (
    ROOT,
    import_graph,
    import_statements,
    imported_names,
    module_files,
    package_dirs,
    source_tree,
)
from tests.lazy import lazy

nx = lazy("networkx")  # imported by the first test that draws a graph

BARE = {"ir", "spec", "interpreter", "codegen"}


def _repo_sources() -> list[Path]:
    """Every Python file of the checkout that code is read from: the package, tests, bench,
    examples."""
    folders = {p for p in package_dirs().values()} | {ROOT / "tests", ROOT / "bench",
                                                     ROOT / "examples"}
    files = set()
    for folder in folders:
        files.update(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)
    return sorted(files)


def test_module_names_follow_the_package_dir_map():
    files = module_files()
    assert files["ncdc.ir.morphisms"] == ROOT / "ir" / "morphisms.py"
    assert files["ncdc.spec"] == ROOT / "spec" / "__init__.py"
    assert files["ncdc.interpreter.rules"] == ROOT / "interpreter" / "rules" / "__init__.py"
    assert files["ncdc.verify.check"] == ROOT / "ncdc" / "verify" / "check.py"
    assert not any(name.split(".")[0] != "ncdc" for name in files)


def test_no_code_imports_the_bare_folder_names():
    found = []
    for path in _repo_sources():
        for node in import_statements(source_tree(path)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                      if n.split(".")[0] in BARE | {"conftest"}]
    assert found == []


def test_no_import_circles_function_level_imports_included():
    graph = import_graph()
    assert graph.number_of_nodes() > 150 and graph.number_of_edges() > 500
    cycles = list(nx.simple_cycles(graph))
    assert cycles == [], [" -> ".join([*c, c[0]]) for c in cycles[:10]]


def test_the_circle_test_sees_function_level_imports(tmp_path):
    """The graph counts an import inside a function body: a circle hidden there is found."""
    (tmp_path / "mod.py").write_text("def f():\n    from ncdc.ir import cost\n"
                                     "    return cost\n")
    assert ("ncdc.ir", "cost", 2) in imported_names(tmp_path / "mod.py", "ncdc.ir.x")
    graph = import_graph()
    # a known function-level edge of the package itself, and a package's own submodule
    assert graph.has_edge("ncdc.commands.run", "ncdc.distributed")
    assert graph.has_edge("ncdc.interpreter", "ncdc.interpreter.rules")
    assert "ncdc.distributed" not in nx.descendants(graph, "ncdc.rank")


def _load_every_module() -> list[str]:
    names = [n for n in module_files() if not n.endswith("__main__")]
    for name in names:
        importlib.import_module(name)
    return names


def _checkout_modules() -> list:
    """The loaded modules whose source is a file of this checkout."""
    return [mod for mod in list(sys.modules.values())
            if getattr(mod, "__file__", None)
            and os.path.realpath(mod.__file__).startswith(str(ROOT) + os.sep)]


def test_every_module_is_loaded_under_one_name():
    """Each source file of the package (and of the test helpers) is one module object: no file
    is in ``sys.modules`` under two names, and no bare ``ir``/``spec``/... module exists."""
    _load_every_module()
    by_file: dict[str, list[str]] = {}
    for mod in _checkout_modules():
        by_file.setdefault(os.path.realpath(mod.__file__), []).append(mod.__name__)
    twice = {f: n for f, n in by_file.items() if len(n) > 1}
    assert twice == {}
    assert not BARE & set(sys.modules)
    assert len(by_file) > 150


def test_each_ir_class_is_one_class_object():
    """Collected over every loaded module: a class defined in a file of the checkout exists
    as one class object (keyed by its file and qualified name)."""
    _load_every_module()
    classes: dict[tuple[str, str], set[int]] = {}
    for mod in _checkout_modules():
        for value in list(vars(mod).values()):
            if not inspect.isclass(value):
                continue
            try:
                file = inspect.getsourcefile(value)
            except TypeError:
                continue
            if file and os.path.realpath(file).startswith(str(ROOT) + os.sep):
                classes.setdefault((os.path.realpath(file), value.__qualname__),
                                   set()).add(id(value))
    assert {k for k, ids in classes.items() if len(ids) > 1} == set()
    from ncdc import ir
    from ncdc.ir import morphisms

    assert ir.Block is morphisms.Block
    assert (str(ROOT / "ir" / "morphisms.py"), "Block") in classes


def test_ncdc_has_no_tests_package_and_no_search_path_patch():
    import ncdc

    assert list(ncdc.__path__) == [str(ROOT / "ncdc")]
    assert importlib.util.find_spec("ncdc.tests") is None
    assert "__path__" not in (ROOT / "ncdc" / "__init__.py").read_text()


def test_a_fresh_interpreter_outside_the_checkout_sees_ncdc_only(tmp_path):
    """Run from elsewhere (no checkout on sys.path): ``ncdc.ir`` resolves, the bare names and
    ``ncdc.tests`` do not."""
    script = ("import importlib.util as u, ncdc.ir.morphisms as m\n"
              "print(m.__name__, [n for n in ('ir', 'spec', 'interpreter', 'codegen', "
              "'ncdc.tests', 'tests') if u.find_spec(n) is not None])\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ncdc.ir.morphisms", "[]"]


@pytest.mark.parametrize("name", ["ncdc", "ncdc.cli", "ncdc.ir", "ncdc.spec", "ncdc.codegen",
                                  "ncdc.verify.check", "ncdc.verify.decoder_check"])
def test_cheap_imports_stay_cheap(name):
    """``import ncdc`` and the CLI's parser load neither the IR nor sympy; the IR and the
    decoder load neither numpy nor torch; the code generator and the check tools load torch on
    first use only (:func:`ncdc.ir.lazy.lazy_module`), so collecting their tests stays cheap."""
    if name.startswith(("ncdc.codegen", "ncdc.verify")):
        heavy: tuple[str, ...] = ("torch",)
    else:
        heavy = ("numpy", "torch") + (("sympy", "ncdc.ir") if name in ("ncdc", "ncdc.cli")
                                      else ())
    script = (f"import sys, {name}\n"
              f"{'ncdc.cli.build_parser()' if name == 'ncdc.cli' else ''}\n"
              f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_the_benches_load_the_profiling_helper_by_path(tmp_path):
    """``bench/codegen.py`` and ``bench/hf.py`` load ``tests/profiling.py`` by its path, from a
    directory where ``tests`` is no package: it must import nothing of ``tests``."""
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('p', {str(ROOT / 'tests' / 'profiling.py')!r})\n"
            "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
            "print(callable(mod.peak_forward_bytes), 'tests' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]
