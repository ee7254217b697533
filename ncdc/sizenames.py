"""Readable size names on the command line and in the API (the naming rule is
``spec.symbol_names``): qualified names (``k@L_{q}``) are accepted wherever a size is named
(``--size k@L_{v}=16``, ``Spec.bind(sizes={"k@L_v": 16})``; braces and spaces are optional, as
for labels) and used when printing expressions: ``12*h*m*k@L_{q} + 12*h*m*k@L_{v}`` rather
than two equal-looking ``12*h*k*m``.
"""
from __future__ import annotations

import difflib

import sympy

from ncdc.ir.errors import BindingError
from ncdc.ir.numeric import FreeNumeric
from ncdc.ir.shapes import size_text
from ncdc.spec.bindings import match
from ncdc.spec.checks_binding import symbol_uses
from ncdc.spec.checks_sites import all_sites
from ncdc.spec.symbol_names import has_namesakes
from ncdc.spec.symbol_names import qualified_names as names_of


def qualified_names(doc) -> dict[FreeNumeric, str]:
    """Every symbol of a loaded document (``Spec.doc``) -> its readable name."""
    symbols = list(doc.symbols.values())
    if not has_namesakes(symbols):
        return {s: s.label for s in symbols}

    sites = list(all_sites(doc.data))
    return names_of(symbols, symbol_uses(sites), {s.path: s.node for s in sites})


def _key(text: str) -> str:
    return text.replace(" ", "").replace("{", "").replace("}", "").replace("\\text", "")


def resolve(keys, names: dict[FreeNumeric, str]) -> dict:
    """``keys`` (name -> value) with qualified names and generated config field names
    (``hat_v``, ``k_L_q``: :func:`ncdc.codegen.names.field_names`) replaced by ``id:<uid>``,
    which ``spec.bindings.bind`` understands; other keys pass unchanged."""
    by_name = {_key(n): s for s, n in names.items() if "@" in n}
    fields: dict | None = None
    out = {}
    for k, v in (keys or {}).items():
        sym = by_name.get(_key(k)) if "@" in k else None
        if sym is None and not match(names, k):
            fields = _fields(names) if fields is None else fields
            sym = fields.get(k.strip())
        out[f"id:{sym.uid}" if sym is not None else k] = v
    return out


def _fields(names: dict[FreeNumeric, str]) -> dict[str, FreeNumeric]:
    """Config field name -> symbol, as generated files name them."""
    from ncdc.codegen.names import field_names  # torch: only for a key nothing else names

    return {f: s for s, f in field_names(names, names).items()}


def check_keys(symbols, names: dict[FreeNumeric, str], keys, origin: str) -> None:
    """A :class:`BindingError` for the first key of ``keys`` that names no symbol, listing
    the names known (qualified where labels are shared) and the close matches."""
    syms = list(symbols)
    for key in keys or {}:
        if match(syms, key):
            continue
        known = sorted({names.get(s, s.label) for s in syms})
        near = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise BindingError(f"{origin} {key}: no symbol of this spec is named {key!r}{hint} "
                           f"(known: {', '.join(known[:60])}"
                           + (", ...)" if len(known) > 60 else ")"))


def expr_text(expr, env=None, names: dict[FreeNumeric, str] | None = None) -> str:
    """An integral expression as text: the integer when bound, else sympy's form with shared
    labels written qualified."""
    if names:
        swap = {s: sympy.Symbol(n) for s, n in names.items() if n != s.label}
        if swap and env is not None:
            expr = env.subs(expr)
        if swap:
            expr = sympy.sympify(expr).xreplace(swap)
    return size_text(expr, env)
