"""The code generator's module structure: no import circles (function-level imports included),
and rule modules depend only on the lowering context, never on the class builder or driver."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.lazy import lazy

nx = lazy("networkx")  # imported by the first test that draws a graph

ROOT = Path(__file__).resolve().parents[1] / "codegen"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["codegen", *parts])


def _imports(path: Path) -> set[str]:
    """Every codegen module ``path`` imports, at any depth of its code."""
    mod = _module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("ncdc.codegen"):
                target = node.module.removeprefix("ncdc.")
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if (ROOT.parent / (sub.replace(".", "/") + ".py")).exists()
                        or (ROOT.parent / sub.replace(".", "/")).is_dir() else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("ncdc.codegen"):
                    out.add(alias.name.removeprefix("ncdc."))
    return {m for m in out if m != mod}


def _graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for path in sorted(ROOT.rglob("*.py")):
        if "prelude" in path.parts:
            continue
        mod = _module_name(path)
        g.add_node(mod)
        for dep in _imports(path):
            if dep != "codegen":
                g.add_edge(mod, dep)
    return g


def test_graph_is_read_correctly():
    g = _graph()
    assert g.has_edge("codegen.rules.contraction", "codegen.registry")
    assert g.has_edge("codegen.broadcast", "codegen.rules")
    assert g.has_edge("codegen.lower", "codegen.broadcast")


def test_codegen_has_no_import_circle():
    cycles = list(nx.simple_cycles(_graph()))
    assert cycles == []


@pytest.mark.slow
def test_rule_modules_depend_only_on_the_lowering_context():
    g = _graph()
    forbidden = {"codegen.lower", "codegen.broadcast", "codegen.generate", "codegen.pairs",
                 "codegen.place", "codegen.reads", "codegen.classes",
                 "codegen.calls", "codegen.tape"}
    for mod in g.nodes:
        if mod.startswith("codegen.rules."):
            reach = nx.descendants(g, mod)
            assert not (reach & forbidden), (mod, sorted(reach & forbidden))


TEXT_HELPERS = {"names.py", "fixed_data.py"}
"""Modules that may use ``re``: they sanitise spec text (labels, LaTeX titles) into identifiers
and comments, never generated code."""


def test_no_regular_expression_touches_generated_code():
    """The passes work on statements (codegen/passes.py), never on source text: outside the
    spec-text helpers no codegen module imports ``re``."""
    users = set()
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "re" or n.startswith("re.") for n in names):
                users.add(path.relative_to(ROOT).as_posix())
    assert users == TEXT_HELPERS, sorted(users)


def test_parameters_are_listed_once_per_generate(bundled, monkeypatch):
    """``generate`` computes the root's ``param_specs`` once and hands the list on (data-fixed
    sizes, storage formats, state_dict keys); no other module of the generator lists them."""
    import importlib

    generate_module = importlib.import_module("ncdc.codegen.generate")
    calls = []
    real = generate_module.param_specs

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(generate_module, "param_specs", counted)
    g = generate_module.generate(bundled.block("Expert Gate"), bundled.bind("tiny").env)
    assert len(calls) == 1 and g.param_keys
    listing = {path.relative_to(ROOT).as_posix() for path in ROOT.rglob("*.py")
               if "param_specs(" in path.read_text("utf-8")}
    assert listing <= {"generate.py", "check.py"}, sorted(listing)  # check.py: the check tool
