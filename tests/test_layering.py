"""The floors depend downwards only (docs/architecture.md, "Dependency rules").

    ir  <-  spec
    ir  <-  interpreter, codegen          (the two backends: ir only, never each other)
    ir, interpreter, codegen  <-  ncdc.verify   (the check tools comparing both backends)
    everything  <-  the application: ncdc.api, ncdc.cli, ncdc.commands, ncdc.view, ...

Read from the import graph of the source (function-level imports included) and from each module's
third-party imports.
"""
from __future__ import annotations

import pytest

from tests.import_graph import import_graph, imported_names, module_files

FLOORS = ("ncdc.ir", "ncdc.spec", "ncdc.interpreter", "ncdc.codegen", "ncdc.verify")
APP = "app"
# floor -> the floors (besides itself) it may import
ALLOWED = {
    "ncdc.ir": set(),
    "ncdc.spec": {"ncdc.ir"},
    "ncdc.interpreter": {"ncdc.ir"},
    "ncdc.codegen": {"ncdc.ir"},
    "ncdc.verify": {"ncdc.ir", "ncdc.interpreter", "ncdc.codegen"},
}
# third-party and serialisation modules a floor must not import
FORBIDDEN_EXTERNAL = {
    "ncdc.ir": {"json", "numpy", "torch", "safetensors", "ml_dtypes"},
    "ncdc.spec": {"numpy", "torch"},
    "ncdc.interpreter": {"torch"},
}


def floor(module: str) -> str:
    """The floor a module belongs to: one of FLOORS, or the application."""
    return next((f for f in FLOORS if module == f or module.startswith(f + ".")), APP)


def _violations(graph):
    bad = []
    for a, b, data in graph.edges(data=True):
        fa, fb = floor(a), floor(b)
        if fa == fb or fa == APP:
            continue
        if fb not in ALLOWED[fa]:
            bad.append(f"{a} -> {b} (line {data['lines'][0]})")
    return sorted(bad)


def test_floors_import_only_the_floors_below():
    assert _violations(import_graph()) == []


def test_the_rule_check_can_fail():
    graph = import_graph()
    graph.add_edge("ncdc.interpreter.api", "ncdc.spec.bindings", lines=[1])
    graph.add_edge("ncdc.codegen.lower", "ncdc.interpreter.evaluate", lines=[2])
    graph.add_edge("ncdc.ir.cost", "ncdc.api", lines=[3])
    assert _violations(graph) == ["ncdc.codegen.lower -> ncdc.interpreter.evaluate (line 2)",
                                  "ncdc.interpreter.api -> ncdc.spec.bindings (line 1)",
                                  "ncdc.ir.cost -> ncdc.api (line 3)"]


def test_only_the_entry_point_imports_the_cli():
    graph = import_graph()
    assert sorted(graph.predecessors("ncdc.cli")) == ["ncdc.__main__"]


def test_the_check_tools_live_above_both_backends():
    graph = import_graph()
    verify = [m for m in graph if floor(m) == "ncdc.verify"]
    reach = {floor(b) for m in verify for b in graph.successors(m)}
    assert {"ncdc.interpreter", "ncdc.codegen"} <= reach
    assert "ncdc.commands.cost_report" in graph and "ncdc.cost_report" not in graph


@pytest.mark.parametrize("fl", sorted(FORBIDDEN_EXTERNAL))
def test_floor_does_not_import_heavy_or_serialising_modules(fl):
    found = []
    for module, path in module_files().items():
        if floor(module) != fl:
            continue
        for base, _name, line in imported_names(path, module):
            if base.split(".")[0] in FORBIDDEN_EXTERNAL[fl]:
                found.append(f"{module}:{line} {base}")
    assert found == []
