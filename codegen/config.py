"""The generated file's config: one ``@dataclass`` holding every size and constant its modules
read, a field per symbol (named by :func:`codegen.names.field_base`), the binding's value as
its default, the diagram's symbol beside it. Every module takes it (``config=None``: the
defaults)."""
from __future__ import annotations

import textwrap

from .classinfo import INDENT
from .names import comment_text, docstring


def config_source(gen, name: str, symbols, title: str) -> str:
    """The ``@dataclass`` class ``name`` with one field per symbol of ``symbols`` (sorted by
    field name; the symbols without a value in the binding first, as required fields)."""
    fields = sorted(symbols, key=lambda s: (gen.default_of(s) is not None, gen.sym_name(s)))
    doc = textwrap.fill(f"Sizes and constants of {title}. Defaults: the binding the file was "
                        "generated with; each field's comment gives the diagram's symbol.", 88)
    lines = ["@dataclass", f"class {name}:", INDENT + docstring(doc, INDENT), ""]
    for s in fields:
        d = gen.default_of(s)
        kind = "int" if d is None or d.lstrip("-").isdigit() else "float"
        value = "" if d is None else f" = {d}"
        what = comment_text(s.label, 40).strip()
        if s.code_form:
            what += f" ({comment_text(s.code_form, 40)})"
        what = what.strip()
        lines.append(f"{INDENT}{gen.sym_name(s)}: {kind}{value}" + (f"  # {what}" if what else ""))
    return "\n".join(lines) + "\n"
