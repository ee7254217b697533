"""The small public API: load a spec, inspect it, bind its sizes."""
from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import resources

from ncdc.ir.errors import Diagnostic
from ncdc.ir.morphisms import Block, Morphism
from ncdc.ir.params import ParamSpec, param_specs
from ncdc.ir.walk import Site, blocks, find_block
from ncdc.spec.bindings import Binding, bind
from ncdc.spec.loader import Document, load_path

BUNDLED_NAME = "deepseek_v41_flash.json"


def bundled_spec_path() -> str:
    """Path of the bundled default spec (DeepSeek-V4.1-Flash, truncated as delivered)."""
    return os.fspath(resources.files("ncdc").joinpath("data", BUNDLED_NAME))


class Spec:
    """A loaded diagram spec: the model term plus its repository records."""

    def __init__(self, doc: Document):
        self.doc = doc

    @property
    def data(self) -> Morphism:
        return self.doc.data

    @property
    def source(self) -> str:
        return self.doc.source

    @property
    def truncated(self):
        return self.doc.truncated

    @property
    def symbols(self):
        return self.doc.symbols

    def validate(self, binding: Binding | None = None) -> list[Diagnostic]:
        """Every problem found, in one pass (see :mod:`spec.validate`)."""
        from ncdc.spec.validate import validate

        return validate(self.doc, binding)

    def block(self, title_or_path: str) -> Morphism:
        """A block (or any morphism) by JSON path or by plain title."""
        return find_block(self.doc.data, title_or_path).node

    def site(self, title_or_path: str) -> Site:
        return find_block(self.doc.data, title_or_path)

    def blocks(self) -> list[Site]:
        return blocks(self.doc.data)

    def bind(self, preset: str | None = "released", sizes: Mapping[str, object] | None = None,
             constants: Mapping[str, object] | None = None) -> Binding:
        return bind(self.doc.symbols.values(), preset, sizes, constants)

    def params(self, root: Morphism | None = None, binding: Binding | None = None,
               collapse: int | None = None) -> list[ParamSpec]:
        """Parameter occurrences; blocks repeating more than ``collapse`` times are listed
        once with a ``count`` (see :func:`ir.params.param_specs`)."""
        return param_specs(root if root is not None else self.doc.data,
                           binding.env if binding is not None else None, collapse)

    def __repr__(self):
        kind = "salvaged" if self.doc.salvage is not None else "complete"
        return f"<Spec {os.path.basename(self.source)} ({kind}, {len(self.blocks())} blocks)>"


def load(path: str | os.PathLike | None = None, salvage: bool = False,
         max_bytes: int | None = None) -> Spec:
    """Load a spec. ``path=None`` loads the bundled spec (salvaged, since it is truncated).
    A file larger than ``max_bytes`` (default 256 MiB) is refused before it is read."""
    if path is None:
        return Spec(load_path(bundled_spec_path(), salvage=True))
    return Spec(load_path(path, salvage=salvage, max_bytes=max_bytes))


def interpret(block, **kwargs):
    """The reference numpy interpreter for ``block`` (see ``ncdc.interpreter.interpret``)."""
    from ncdc.interpreter import interpret as _interpret

    return _interpret(block, **kwargs)


def compile_torch(block, **kwargs):
    """PyTorch source and module for ``block`` (see ``ncdc.codegen.compile_torch``)."""
    from ncdc.codegen import compile_torch as _compile

    return _compile(block, **kwargs)


__all__ = ["Block", "Spec", "bundled_spec_path", "compile_torch", "interpret", "load"]
