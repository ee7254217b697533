"""A Hugging Face ``config.json`` of DeepSeek-V4 as a binding of the bundled spec's sizes and
constants (``--config``).

Each size field names one size symbol (:data:`SIZES`; ``j``, the heads per output group, is
``num_attention_heads / o_groups``; ``t``, the rotated pairs per head, half of
``qk_rope_head_dim``), each constant field one or more constants (:data:`CONSTANTS`). Fields
whose value the diagram fixes in its structure (:data:`FIXED`: one key-value head, one shared
expert, the sqrt-softplus score, the 3/2 routed scale, 20 Sinkhorn rounds, ...) and layer 0's
kind are checked, not bound. A value is refused, with every refusal listed in one
:class:`ConfigError`, where it differs from a fixed one, from the same symbol's ``--size`` or
``--constant``, or (under the ``released`` preset) from the value the diagram states.
"""
from __future__ import annotations

import json
import math
import os

from .errors import CheckpointError, MapError

SIZES = {"hidden_size": "m", "hc_mult": "n", "num_attention_heads": "h", "head_dim": "c",
         "q_lora_rank": "q", "o_groups": "g", "o_lora_rank": "o", "sliding_window": "w",
         "n_routed_experts": "e", "num_experts_per_tok": "k", "moe_intermediate_size": "f",
         "vocab_size": "v"}
"""config field -> the size symbol it binds (by label)."""
CONSTANTS = {"rms_norm_eps": (r"\varepsilon", r"\epsilon"),
             "hc_eps": (r"\varepsilon_{\mathrm{hc}}",),
             "swiglu_limit": (r"\lambda",),
             "rope_theta": (r"\beta_0",),
             "compress_rope_theta": (r"\beta",)}
"""config field -> the constants it binds (by label)."""
FIXED = {"num_key_value_heads": 1, "n_shared_experts": 1, "scoring_func": "sqrtsoftplus",
         "hidden_act": "silu", "norm_topk_prob": True, "routed_scaling_factor": 1.5,
         "hc_sinkhorn_iters": 20}
"""config field -> the value the diagram's structure has (absent fields are not checked)."""
LAYER0 = {"layer_types": "sliding_attention", "mlp_layer_types": "moe"}
"""config list field -> the kind of layer 0 the diagram draws (a Sliding Window Layer with a
learned top-k Expert Gate)."""
MAX_BYTES = 4 << 20


class ConfigError(CheckpointError):
    """A config.json whose fields disagree with the diagram or the command line; lists each."""


def read_config(path) -> dict:
    """The JSON object of ``path``; unreadable or not an object is a :class:`MapError`
    (a usage problem, exit 2)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read(MAX_BYTES).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise MapError(f"--config {path!r} is not a readable JSON file: "
                       f"{getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(doc, dict):
        raise MapError(f"--config {path!r}: the document must be a JSON object")
    return doc


def _number(doc, field):
    """A finite number field of ``doc``, else None."""
    v = doc.get(field)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return v if ok else None


def _whole(doc, field):
    """A whole-number field of ``doc`` from 0 to 2**63 - 1, else None (a size)."""
    v = doc.get(field)
    return v if type(v) is int and 0 <= v < 2**63 else None


def config_values(doc: dict) -> tuple[dict, dict, list[str]]:
    """``(sizes, constants, problems)``: ``{label: (value, field)}`` for the sizes and
    constants the config binds, and its fields that disagree with the diagram's structure."""
    sizes, problems = {}, []
    for field, label in SIZES.items():
        v = _whole(doc, field)
        if v is not None:
            sizes[label] = (v, field)
    heads, groups = _whole(doc, "num_attention_heads"), _whole(doc, "o_groups")
    if heads is not None and groups:
        if heads % groups:
            problems.append(f"num_attention_heads = {heads} is not a multiple of o_groups = "
                            f"{groups} (the diagram has h = g * j)")
        else:
            sizes["j"] = (heads // groups, "num_attention_heads / o_groups")
    rope = _whole(doc, "qk_rope_head_dim")
    factor = _number(doc, "partial_rotary_factor")
    if rope is None and factor is not None and 0 <= factor <= 1 and \
            _whole(doc, "head_dim") is not None:
        rope = int(doc["head_dim"] * factor)
    if rope is not None:
        if rope % 2:
            problems.append(f"qk_rope_head_dim = {rope} is odd (the diagram rotates pairs)")
        else:
            sizes["t"] = (rope // 2, "qk_rope_head_dim / 2")
    return sizes, _constants(doc), problems + _fixed(doc)


def _constants(doc: dict) -> dict:
    consts = {}
    main = (doc.get("rope_parameters") or {}).get("main") if isinstance(
        doc.get("rope_parameters"), dict) else None
    for field, labels in CONSTANTS.items():
        v = _number(doc, field)
        if field == "rope_theta" and isinstance(main, dict) and \
                _number(main, "rope_theta") is not None:
            v = main["rope_theta"]
        if v is not None:
            for label in labels:
                consts[label] = (v, field)
    return consts


def _fixed(doc: dict) -> list[str]:
    """The fields of ``doc`` that differ from the diagram's structure."""
    problems = []
    for field, want in FIXED.items():
        if field in doc and doc[field] != want:
            problems.append(f"{field} = {doc[field]!r}, but the diagram has {want!r}")
    for field, want in LAYER0.items():
        kinds = doc.get(field)
        if isinstance(kinds, list) and kinds and kinds[0] != want:
            problems.append(f"{field}[0] = {kinds[0]!r}, but the diagram's layer 0 is "
                            f"{want!r}")
    return problems


def with_config(spec, path, preset, sizes: dict, constants: dict) -> tuple[dict, dict]:
    """The ``--size`` and ``--constant`` assignments with those of the config at ``path``
    added; every field that disagrees (see the module docstring) is listed in one
    :class:`ConfigError`."""
    from ncdc.spec.bindings import match

    doc = read_config(path)
    c_sizes, c_consts, problems = config_values(doc)
    base = spec.bind(preset, sizes, constants)
    syms = list(spec.doc.symbols.values())
    out = ({}, {})
    for (given, found, flag), slot in (((sizes, c_sizes, "--size"), 0),
                                       ((constants, c_consts, "--constant"), 1)):
        mine = {id(s): k for k in given for s in match(syms, k)}
        for label, (value, field) in found.items():
            hits = match(syms, label)
            if not hits:
                continue
            now = base.env.values.get(hits[0])
            differs = now is not None and float(now) != float(value)
            if any(id(s) in mine for s in hits):
                if differs:
                    problems.append(f"{field} = {value}, but {flag} "
                                    f"{mine[next(id(s) for s in hits if id(s) in mine)]}="
                                    f"{now}")
            elif differs and "stated in the spec" in base.sources.get(hits[0], ""):
                problems.append(f"{field} = {value}, but the diagram states {label} = {now}")
            else:
                out[slot][label] = value
    if problems:
        raise ConfigError(f"--config {os.fspath(path)!r}: {len(problems)} field(s) disagree: "
                          + "; ".join(problems))
    return {**out[0], **sizes}, {**out[1], **constants}


__all__ = ["CONSTANTS", "FIXED", "SIZES", "ConfigError", "config_values", "read_config",
           "with_config"]
