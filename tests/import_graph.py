"""The import graph of the installed package, read from the source's AST.

Every ``import`` statement counts, at module level or inside a function, so a circle hidden in a
function-level import is still a circle. Module names follow the package-dir map in pyproject.toml
(``ir/`` is ``ncdc.ir``), so the graph is the one the wheel has. A package's ``__init__`` that
imports its own submodules (re-exports, registration) has an edge to each, so a submodule that
imports its own package's re-exports closes a circle with it.
"""
from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

from tests.lazy import lazy

nx = lazy("networkx")  # imported by the first test that draws a graph


ROOT = Path(__file__).resolve().parent.parent


def package_dirs() -> dict[str, Path]:
    """Package name -> its folder, from pyproject's packages list and package-dir map."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = config["package-dir"]
    dirs = {}
    for package in config["packages"]:
        # the longest mapped prefix decides the folder
        prefix = max((p for p in mapping if package == p or package.startswith(p + ".")), key=len)
        rest = package[len(prefix):].lstrip(".")
        dirs[package] = ROOT / mapping[prefix] / Path(*rest.split(".")) if rest else ROOT / mapping[prefix]
    return dirs


def module_files() -> dict[str, Path]:
    """Every module of the package: dotted name -> source file (a package's is its __init__)."""
    files = {}
    for package, folder in package_dirs().items():
        for path in sorted(folder.glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            files[name] = path
    return files


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def source_tree(path: Path) -> ast.Module:
    """``path`` parsed, once per process while the file is unchanged: the structure tests read
    the same sources many times over."""
    stat = path.stat()
    return _parse(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _parse(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)


def import_statements(tree: ast.AST, type_checking: bool = True):
    """Every ``import`` and ``from ... import`` statement of ``tree``, at any depth (functions,
    branches, handlers), in no particular order; without ``type_checking``, none under ``if
    TYPE_CHECKING:``. Only statements are walked: an import is never inside an expression."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        stack.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, _BLOCKS))


def imported_names(path: Path, module: str) -> list[tuple[str, str | None, int]]:
    """(absolute dotted module, imported name or None, line) for each name an import in ``path``
    brings in; ``from X import y`` gives ``(X, y)``, ``import X`` gives ``(X, None)``. Imports
    under ``if TYPE_CHECKING:`` never run and are skipped."""
    stat = path.stat()
    return list(_imported_names(path, module, stat.st_mtime_ns, stat.st_size))


@functools.cache
def _imported_names(path: Path, module: str, mtime_ns: int, size: int) -> tuple:
    is_package = path.stem == "__init__"
    found = []
    for node in sorted(import_statements(source_tree(path), type_checking=False),
                       key=lambda n: (n.lineno, n.col_offset)):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base_parts = parts if is_package else parts[:-1]
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.extend((base, alias.name, node.lineno) for alias in node.names)
    return tuple(found)


def resolve(target: str, modules: set[str]) -> str | None:
    """The module ``target`` names, or None when it is outside the package."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def import_graph() -> nx.DiGraph:
    """Directed graph module -> module it imports, each edge carrying the lines that import."""
    files = module_files()
    modules = set(files)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in files.items():
        for base, name, line in imported_names(path, module):
            # ``from X import y`` imports the module X.y when there is one, else a name of X
            target = f"{base}.{name}" if name and f"{base}.{name}" in modules else base
            resolved = resolve(target, modules)
            if resolved is None or resolved == module:
                continue
            lines = graph.get_edge_data(module, resolved, {}).get("lines", [])
            graph.add_edge(module, resolved, lines=[*lines, line])
    return graph
