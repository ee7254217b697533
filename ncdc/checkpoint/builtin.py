"""The checkpoint maps shipped with ncdc, by name (``--map deepseek-v4-hf``): the files
``ncdc/checkpoint/maps/NAME.toml``, package data. Each maps the embedding and layer 0 of the
bundled spec; docs/checkpoints.md has their concordance. Cheap to import (the CLI's help lists
them)."""
from __future__ import annotations

import os

BUILTIN = {
    "deepseek-v4-hf": "Hugging Face transformers' DeepSeek-V4 (module names and "
                      "save_pretrained's names)",
    "deepseek-v4": "DeepSeek's release layout of DeepSeek-V4 (FP8 weights with 128x128 block "
                   "scales, FP4 experts with per-32 E8M0 scales)",
}
"""Built-in map name -> the checkpoints it reads."""


def builtin_path(name) -> str | None:
    """The file of the built-in map ``name``, or None when ``name`` names none."""
    if not isinstance(name, str) or name not in BUILTIN:
        return None
    from importlib import resources

    return os.fspath(resources.files("ncdc.checkpoint").joinpath("maps", name + ".toml"))


def builtin_help() -> str:
    """The built-in maps as a help text lists them."""
    return "; ".join(f"{name}: {what}" for name, what in BUILTIN.items())


__all__ = ["BUILTIN", "builtin_help", "builtin_path"]
