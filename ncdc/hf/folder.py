"""Writing an exported folder: each file through :func:`ncdc.commands.output.write_output`
(whole or not at all), the weights as safetensors, sharded past a size limit with the index
transformers reads (``model.safetensors.index.json``: ``metadata.total_size`` and a
``weight_map`` from each key to its shard).
"""
from __future__ import annotations

import json
import os
import re
from importlib import resources
from string import Template

from ncdc.commands.output import write_output, write_text

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
SHARD = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")


def template(name: str, **values) -> str:
    """The text of ``templates/<name>.tmpl`` with its ``$names`` replaced."""
    text = resources.files("ncdc.hf").joinpath("templates", f"{name}.tmpl").read_text("utf-8")
    return Template(text).substitute(values)


def shards(tensors: dict, limit: int) -> list[list[str]]:
    """Keys grouped in order into shards of at most ``limit`` bytes (a tensor larger than the
    limit is a shard of its own)."""
    groups: list[list[str]] = [[]]
    size = 0
    for key, t in tensors.items():
        n = t.numel() * t.element_size()
        if groups[-1] and size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append(key)
        size += n
    return groups


def write_weights(folder: str, tensors: dict, limit: int) -> list[str]:
    """``tensors`` (name -> torch tensor) as ``model.safetensors``, or as numbered shards and
    their index where they exceed ``limit`` bytes; the names of the files written. Shards and an
    index of an earlier export that this one does not write are removed. The files' metadata
    is transformers' ``{"format": "pt"}`` alone: safetensors writes several entries in no fixed
    order, and the same export should give the same bytes."""
    from safetensors.torch import save_file

    meta = {"format": "pt"}
    groups = shards(tensors, limit)
    written = []
    if len(groups) == 1:
        names = [WEIGHTS]
    else:
        names = [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    for name, keys in zip(names, groups, strict=True):
        part = {k: tensors[k].detach().contiguous().clone() for k in keys}
        write_output(os.path.join(folder, name), lambda tmp, part=part: save_file(part, tmp, meta),
                     "--hf")
        written.append(name)
        del part
    if len(groups) > 1:
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index = {"metadata": {"total_size": total},
                 "weight_map": {k: name for name, keys in zip(names, groups, strict=True)
                                for k in keys}}
        write_json(os.path.join(folder, INDEX), index)
        written.append(INDEX)
    for old in os.listdir(folder):
        if (old in (WEIGHTS, INDEX) or SHARD.fullmatch(old)) and old not in written:
            os.unlink(os.path.join(folder, old))
    return written


def write_json(path: str, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n", "--hf")


__all__ = ["INDEX", "WEIGHTS", "shards", "template", "write_json", "write_text", "write_weights"]
