"""The config's fields: the sizes and constants the generated module is built with (the
fields of the generated file's ``@dataclass`` config, which every module takes as ``config``,
defaults the values it was generated at), and the keywords of its root class's constructor
(``quant``, ``static_shapes``, ``stand_in``). :func:`block_fields` reads them;
:func:`config_fields` names them as config attributes. The exported modeling file builds the
module from the config in one function (``build_block`` in
``templates/modeling_ncdc.py.tmpl``), the counterpart of this one.
"""
from __future__ import annotations

import dataclasses
import inspect
import keyword
import math
from dataclasses import dataclass, field

from ncdc.ir.errors import BindingError

#: Attributes every transformers config has; a field of the same name is prefixed ``ncdc_``.
RESERVED = frozenset({
    "architectures", "auto_map", "chunk_size_feed_forward", "dtype", "id2label",
    "is_encoder_decoder", "label2id", "model_type", "name_or_path", "num_labels",
    "output_attentions", "output_hidden_states", "problem_type", "return_dict",
    "transformers_version", "torch_dtype", "vocab_size", "use_cache",
})

TYPES = {bool: "bool", int: "int", float: "float", str: "str"}


@dataclass
class BlockFields:
    """``config``: the generated config dataclass's name; ``sizes``: its fields and their
    values; ``keywords``: the root constructor's keyword-only arguments and their values."""

    config: str
    sizes: dict = field(default_factory=dict)
    keywords: dict = field(default_factory=dict)


def block_fields(namespace, class_name: str, config_name: str,
                 overrides: dict | None = None) -> BlockFields:
    """The fields of the root class ``class_name`` of the generated file ``namespace`` (a
    module) and of its config dataclass ``config_name``; ``overrides`` replace keyword
    defaults (such as ``quant``)."""
    root = getattr(namespace, class_name)
    params = inspect.signature(root.__init__).parameters
    keywords = {n: p.default for n, p in params.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY
                and p.default is not inspect.Parameter.empty}
    for name, value in (overrides or {}).items():
        if name in keywords:
            keywords[name] = value
    sizes = {}
    for f in dataclasses.fields(getattr(namespace, config_name)):
        if f.default is dataclasses.MISSING:
            raise BindingError(f"{f.name}: the generated module's config has no value for it "
                               "(give it with --size)")
        sizes[f.name] = f.default
    return BlockFields(config_name, sizes, keywords)


def _attribute(name: str) -> str:
    if name in RESERVED or name.startswith("ncdc_") or name.startswith("_") \
            or keyword.iskeyword(name):
        return "ncdc_" + name.lstrip("_")
    return name


def config_fields(fields: BlockFields) -> tuple[dict, dict]:
    """``(sizes, keywords)``, each ``config attribute -> field or keyword``: the name itself,
    or ``ncdc_<name>`` where it is a transformers config attribute or starts with ``ncdc_``."""
    sizes = {_attribute(n): n for n in fields.sizes}
    keywords = {}
    for n in fields.keywords:
        name = _attribute(n)
        keywords["ncdc_" + name if name in sizes else name] = n
    return sizes, keywords


def values_of(fields: BlockFields, sizes: dict, keywords: dict) -> dict:
    """``config attribute -> value`` of every field."""
    return {**{a: fields.sizes[n] for a, n in sizes.items()},
            **{a: fields.keywords[n] for a, n in keywords.items()}}


def field_lines(values: dict) -> list[str]:
    """Dataclass field lines of the configuration class, ``    name: type = value``."""
    lines = []
    for name, value in values.items():
        kind = TYPES.get(type(value))
        if kind is None or (isinstance(value, float) and not math.isfinite(value)):
            raise BindingError(f"{name}={value!r}: a config field must be a bool, an int, a "
                               "finite float or a str")
        lines.append(f"    {name}: {kind} = {value!r}")
    return lines


__all__ = ["BlockFields", "block_fields", "config_fields", "field_lines", "values_of"]
