"""The config's fields: the sizes and constants the generated module is built with.

Today a generated root class takes them as keyword arguments of its constructor, with the
values it was generated at as defaults; :func:`block_fields` reads them there and
:func:`config_fields` names them as config attributes. The exported modeling file builds the
module from the config in one function (``build_block`` in ``templates/modeling_ncdc.py.tmpl``),
the counterpart of this one.
"""
from __future__ import annotations

import inspect
import keyword

#: Attributes every transformers config has; a field of the same name is prefixed ``ncdc_``.
RESERVED = frozenset({
    "architectures", "auto_map", "chunk_size_feed_forward", "dtype", "id2label",
    "is_encoder_decoder", "label2id", "model_type", "name_or_path", "num_labels",
    "output_attentions", "output_hidden_states", "problem_type", "return_dict",
    "transformers_version", "torch_dtype", "vocab_size", "use_cache",
})

TYPES = {bool: "bool", int: "int", float: "float", str: "str"}


def block_fields(root_class, overrides: dict | None = None) -> dict:
    """``keyword -> value`` of every keyword-only constructor argument of ``root_class``
    (the generated root) with a default; ``overrides`` replace defaults (such as ``quant``)."""
    out = {}
    for name, p in inspect.signature(root_class.__init__).parameters.items():
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty:
            out[name] = p.default
    for name, value in (overrides or {}).items():
        if name in out:
            out[name] = value
    return out


def config_fields(fields: dict) -> dict:
    """``config attribute -> keyword``: the keyword itself, or ``ncdc_<keyword>`` where it
    is a transformers config attribute or starts with ``ncdc_``."""
    out = {}
    for kw in fields:
        name = kw
        if kw in RESERVED or kw.startswith("ncdc_") or kw.startswith("_") \
                or keyword.iskeyword(kw):
            name = "ncdc_" + kw.lstrip("_")
        out[name] = kw
    return out


def field_lines(fields: dict, names: dict) -> list[str]:
    """Dataclass field lines of the configuration class, ``    name: type = value``."""
    lines = []
    for name, kw in names.items():
        value = fields[kw]
        kind = TYPES.get(type(value))
        if kind is None:
            raise TypeError(f"constructor argument {kw}={value!r}: not a bool, int, float or str")
        lines.append(f"    {name}: {kind} = {value!r}")
    return lines


__all__ = ["block_fields", "config_fields", "field_lines"]
