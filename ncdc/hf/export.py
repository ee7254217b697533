"""``export_hf``: a block (or the whole model) as a folder that ``transformers`` loads with
``trust_remote_code=True``.

The block's generated module is built on the meta device and filled from its weights (a
weights file, a mapped checkpoint, or seeded synthetic values: :mod:`ncdc.rank`); the folder
then holds ``config.json`` (the module's sizes and constants, ``model_type``, ``architectures``,
``auto_map``), ``configuration_ncdc.py`` and ``modeling_ncdc.py`` (the module wrapped in
``PreTrainedConfig``/``PreTrainedModel`` subclasses), ``ncdc_module.py`` (the generated source,
as ``ncdc compile`` writes it), the weights under ``ncdc.`` + the module's own keys
(``model.safetensors``, sharded past ``max_shard_size`` bytes) and a ``README.md`` with the
spec's sha256 and ncdc's version. A diagram that maps token ids to a distribution or logits over
a vocabulary (:mod:`ncdc.hf.kind`) becomes an ``AutoModelForCausalLM``; any other an
``AutoModel``.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace

from ncdc.codegen.decoder import token_input
from ncdc.ir.errors import UsageError

from .fields import block_fields, config_fields, field_lines, values_of
from .folder import template, write_json, write_text, write_weights
from .kind import decoding, language_model

PREFIX = "ncdc"
"""The attribute holding the generated module in the wrapper: every key starts ``ncdc.``."""

DEFAULT_SHARD = 5 * 10**9


@dataclass
class Exported:
    """What :func:`export_hf` wrote: the folder, its files, the classes, the kind."""

    folder: str
    files: list = field(default_factory=list)
    architecture: str = ""
    kind: str = "block"
    incremental: bool = False
    decoding: str = "recompute"
    probabilities: bool = False
    tensors: int = 0
    bytes: int = 0
    fields: dict = field(default_factory=dict)


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _folder(path: str) -> str:
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--hf {path!r} is a file; name a folder")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"--hf {path!r}: the directory {parent!r} does not exist")
    os.makedirs(path, exist_ok=True)
    return path


def export_hf(plan, folder: str, *, spec_path: str | None, title: str,
              max_shard_size: int = DEFAULT_SHARD) -> Exported:
    """Export the module of ``plan`` (a :class:`ncdc.rank.RankPlan`) to ``folder`` (created if
    missing); ``spec_path``: the spec file (its sha256 goes into the config and README; None
    for a term built in memory); ``title``: the block's name for the docstrings."""
    import ncdc
    from ncdc.checkpoint.errors import CheckpointError
    from ncdc.checkpoint.module import missing_user_data
    from ncdc.rank import build_and_load

    if max_shard_size <= 0:
        raise UsageError("--max-shard-size: must be positive")
    folder = _folder(folder)
    # the export's generate() decodes with the file's prefill and step
    built, _, _ = build_and_load(replace(plan, runtime=plan.runtime | {"decoding"}))
    lacking = missing_user_data(built.module)
    if lacking:
        raise CheckpointError(f"data the spec leaves to the user is not in the weights: "
                              f"{', '.join(lacking)}")
    g = built.generated
    root_class = getattr(built.namespace, g.class_name)
    # the data only the user can supply is in the weights: the module is built to load it
    fields = block_fields(built.namespace, g.class_name, g.config_name,
                          {"quant": plan.quant, "stand_in": "load"})
    sizes, keywords = config_fields(fields)
    field_values = values_of(fields, sizes, keywords)
    lm = language_model(plan.morphism, plan.env)
    tokens = token_input(plan.morphism)  # (input, dim from the end) of the token axis
    mode = decoding(plan.morphism, hasattr(root_class, "step"), tokens)
    incremental = mode != "recompute"
    kind = "causal-lm" if lm is not None else "block"
    arch = "NcdcForCausalLM" if lm is not None else "NcdcModel"
    digest = sha256_of(spec_path) if spec_path else "none (built in memory)"
    embedding = None
    if lm is not None:
        first = next(iter(built.module.named_children()), None)
        embedding = first[0] if first is not None else None
    units = sorted({type(m).__name__ for m in _units(built.module)})
    values = dict(title=title, version=ncdc.__version__, root=g.class_name, kind=kind,
                  incremental=incremental, decoding=mode,
                  tokens=repr(list(tokens)) if tokens else None, probabilities=bool(lm and lm.probabilities),
                  embedding=repr(embedding), sha256=digest,
                  vocab_size=lm.vocab if lm is not None else None,
                  fields="\n".join(field_lines(field_values)), sizes_map=repr(sizes),
                  keywords_map=repr(keywords), config_class=repr(fields.config),
                  config_name=fields.config,
                  no_split=repr(units))
    auto = {"AutoConfig": "configuration_ncdc.NcdcConfig", "AutoModel": "modeling_ncdc.NcdcModel"}
    if lm is not None:
        auto["AutoModelForCausalLM"] = "modeling_ncdc.NcdcForCausalLM"
    config = {"architectures": [arch], "auto_map": auto, "model_type": "ncdc",
              "dtype": plan.dtype, **field_values, "ncdc_sizes": sizes,
              "ncdc_keywords": keywords, "ncdc_config": fields.config,
              "ncdc_root": g.class_name, "ncdc_kind": kind,
              "ncdc_incremental": incremental, "ncdc_decoding": mode,
              "ncdc_tokens": list(tokens) if tokens else None,
              "ncdc_probabilities": values["probabilities"],
              "ncdc_embedding": embedding, "ncdc_spec_sha256": digest,
              "ncdc_version": ncdc.__version__, "vocab_size": values["vocab_size"],
              "use_cache": incremental}
    out = Exported(folder, architecture=arch, kind=kind, incremental=incremental,
                   decoding=mode, probabilities=values["probabilities"], fields=field_values)

    for name, text in (("ncdc_module.py", g.source),
                       ("configuration_ncdc.py", template("configuration_ncdc.py", **values)),
                       ("modeling_ncdc.py", template("modeling_ncdc.py", **values))):
        write_text(os.path.join(folder, name), text, "--hf")
        out.files.append(name)
    state = {f"{PREFIX}.{k}": v for k, v in built.module.state_dict().items()}
    out.tensors = len(state)
    out.bytes = sum(t.numel() * t.element_size() for t in state.values())
    out.files += write_weights(folder, state, max_shard_size)
    write_json(os.path.join(folder, "config.json"), config)
    out.files.append("config.json")
    readme = template("README.md", **values,
                      spec=os.path.basename(spec_path) if spec_path else "a term built in memory",
                      architecture=arch, sizes=_sizes(field_values), note=_note(lm, mode),
                      tensors=out.tensors, bytes=out.bytes)
    write_text(os.path.join(folder, "README.md"), readme, "--hf")
    out.files.append("README.md")
    return out


def _units(root):
    """The generated blocks the wrapper checkpoints (``checkpoint_units`` of the template)."""
    import torch.nn as nn

    for child in root.children():
        if isinstance(child, nn.ModuleList):
            yield from child
        else:
            yield child


def _sizes(values: dict) -> str:
    return "\n".join(f"| `{n}` | `{json.dumps(v)}` |" for n, v in values.items())


def _note(lm, mode: str) -> str:
    if lm is None:
        return ("`AutoModel` gives the generated module: `model(*inputs)` takes the diagram's "
                "inputs in order and returns `NcdcOutput(outputs=...)`.")
    text = (f"A causal language model over {lm.vocab} tokens (`AutoModelForCausalLM`, "
            "`generate()`). ")
    if lm.probabilities:
        text += ("The diagram ends in a softmax: its probabilities are presented as "
                 "log-probabilities in `logits`, so sampling draws from the diagram's own "
                 "distribution. ")
    text += {"state": "`generate()` carries ncdc's decoder state (`prefill`/`step`) as its "
                      "cache.",
             "positionwise": "The diagram works position by position: `generate()` runs it on "
                             "each new token only.",
             "recompute": "The diagram is not incremental, so `generate()` recomputes the whole "
                          "sequence for each new token (it says so once, in a warning)."}[mode]
    return text


__all__ = ["Exported", "export_hf", "sha256_of"]
