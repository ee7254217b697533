"""The public API: load a spec, inspect it, bind its sizes, interpret or compile any block.

Sizes are bound the same way for the command line and the API: :meth:`Spec.bind` over every
symbol of the spec (the repository's included), so a sub-block sees the sizes of its enclosing
spec. :func:`interpret` and :func:`compile_torch` find the spec a block came from (or take
``spec=``) and bind through it.
"""
from __future__ import annotations

import os
import weakref
from collections.abc import Mapping
from importlib import resources

from ncdc.ir.errors import BindingError, Diagnostic
from ncdc.ir.morphisms import Block, Morphism
from ncdc.ir.params import ParamSpec, param_specs
from ncdc.ir.walk import Site, blocks, walk
from ncdc.spec.bindings import PRESETS, Binding, bind
from ncdc.spec.checks_sites import all_sites
from ncdc.spec.checks_sizes import check_sizes
from ncdc.spec.loader import Document, load_path
from ncdc.spec.validate import Checker, validate

from .naming import find, labels
from .sizenames import check_keys, qualified_names, resolve

BUNDLED_NAME = "deepseek_v41_flash.json"
DEFAULT_PRESET = "tiny"
"""The preset :func:`interpret`, :func:`compile_torch` and ``ncdc eval/compile/check`` use
when none is given."""

_LOADED: weakref.WeakSet = weakref.WeakSet()
_SCOPES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Blocks handed out by :meth:`Spec.block` -> the symbols and size names of their spec (which
hold no reference back to the tree, so a block alone keeps only these alive)."""


def bundled_spec_path() -> str:
    """Path of the bundled default spec (DeepSeek-V4.1-Flash, truncated as delivered)."""
    return os.fspath(resources.files("ncdc").joinpath("data", BUNDLED_NAME))


class Spec:
    """A loaded diagram spec: the model term plus its repository records."""

    def __init__(self, doc: Document):
        self.doc = doc
        self._node_ids: set[int] | None = None
        self._names = None
        _LOADED.add(self)

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
        """Every problem found, in one pass."""
        return validate(self.doc, binding)

    def block(self, name: str) -> Morphism:
        """A block (or any morphism) by any name ``ncdc`` prints: JSON path, title, label or
        parameter-key path (see ``ncdc.naming``)."""
        return self.site(name).node

    def site(self, name: str) -> Site:
        """The occurrence :meth:`block` finds, with its JSON path and enclosing titles."""
        site = find(self.doc.data, name)
        _SCOPES[site.node] = (tuple(self.doc.symbols.values()), self.size_names())
        return site

    def blocks(self) -> list[Site]:
        return blocks(self.doc.data)

    def label(self, site_or_path) -> str:
        """The label ``ncdc`` prints for a block site (``A / B~1 / C``)."""
        path = getattr(site_or_path, "path", site_or_path)
        return labels(self.doc.data).get(path, path)

    def size_names(self) -> dict:
        """Every symbol -> its readable name (qualified ``k@L_{q}`` where labels are shared)."""
        if self._names is None:
            self._names = qualified_names(self.doc)
        return self._names

    def bind(self, preset: str | None = "released", sizes: Mapping[str, object] | None = None,
             constants: Mapping[str, object] | None = None) -> Binding:
        """Values for every symbol: ``preset`` (``released``, ``tiny``, ``medium``, or None for
        the constants only), then ``sizes`` and ``constants`` by label, qualified name,
        ``code_form`` or ``id:<uid>``."""
        return _bind(self.doc.symbols.values(), self.size_names(), preset, sizes, constants)

    def params(self, root: Morphism | None = None, binding: Binding | None = None,
               collapse: int | None = None) -> list[ParamSpec]:
        """Parameter occurrences; blocks repeating more than ``collapse`` times are listed
        once with a ``count`` (see :func:`ir.params.param_specs`)."""
        return param_specs(root if root is not None else self.doc.data,
                           binding.env if binding is not None else None, collapse)

    def model(self) -> Morphism:
        """The whole model: the data, or its complete leading part when truncated."""
        from ncdc.interpreter.api import prefix

        return prefix(self.doc.data)

    def owns(self, morphism) -> bool:
        """Whether ``morphism`` is a node of this spec's data (by identity)."""
        if self._node_ids is None:
            self._node_ids = {id(s.node) for s in walk(self.doc.data)}
        return id(morphism) in self._node_ids

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


def _bind(symbols, names, preset, sizes, constants) -> Binding:
    sizes, constants = resolve(sizes, names), resolve(constants, names)
    check_keys(symbols, names, sizes, "--size")
    check_keys(symbols, names, constants, "--constant")
    return bind(symbols, preset, sizes, constants)


def spec_of(morphism) -> Spec | None:
    """The loaded spec ``morphism`` belongs to, if it is still alive."""
    for spec in list(_LOADED):
        if spec.owns(morphism):
            return spec
    return None


def _scope(morphism, spec: Spec | None):
    """(symbols, size names) to bind ``morphism`` with: those of its spec, or None."""
    if spec is not None:
        return tuple(spec.doc.symbols.values()), spec.size_names()
    try:
        hit = _SCOPES.get(morphism)
    except TypeError:
        hit = None
    if hit is not None:
        return hit
    owner = spec_of(morphism)
    return None if owner is None else _scope(morphism, owner)


def _target(what, spec: Spec | None):
    """(morphism, owning spec) of a Spec, a morphism, or a block name given with ``spec``."""
    if isinstance(what, Spec):
        return what.model(), what
    if isinstance(what, str):
        if spec is None:
            raise TypeError("a block given by name needs spec=")
        return spec.block(what), spec
    return what, spec


def _env(morphism, spec, env, preset, sizes, constants):
    """The env of ``morphism``, gated (:func:`_size_gate`)."""
    if env is not None:
        if sizes or constants or preset is not None:
            raise ValueError("give either env or preset/sizes/constants, not both")
        binding = Binding(env)
    else:
        scope = _scope(morphism, spec)
        if scope is not None:
            binding = _bind(*scope, preset or DEFAULT_PRESET, sizes, constants)
        else:
            from ncdc.interpreter.symbols import free_numerics

            binding = bind(free_numerics(morphism), preset or DEFAULT_PRESET, sizes, constants)
    _size_gate(morphism, binding)
    return binding.env


def _size_gate(morphism, binding: Binding) -> None:
    """Refuse what the command line's gate refuses for sizes (:mod:`spec.checks_sizes`, code
    ``size-invalid``: negative, non-integral or out-of-int64 sizes, arrays past ``2**63 - 1``
    elements, repetitions past the limit) with the same typed error, a
    :class:`~ir.errors.BindingError` ``refused: size-invalid: ...``, before any allocation."""
    ck = Checker(binding)
    try:
        sites = list(all_sites(morphism))
    except RecursionError:
        return                          # a term too deep: the interpreter reports it, typed
    check_sizes(ck, sites, binding)
    errors = [d for d in ck.out if d.severity == "error"]
    if errors:
        d = errors[0]
        more = f" (and {len(errors) - 1} more; `ncdc validate` lists them)" \
            if len(errors) > 1 else ""
        raise BindingError(f"refused: {d.code}: {d.message}{more}", d.json_path, d.titles)


def interpret(what, env=None, *, spec: Spec | None = None, preset: str | None = None,
              sizes: Mapping[str, object] | None = None,
              constants: Mapping[str, object] | None = None, **kwargs):
    """The reference numpy interpreter, ready to run: ``run = interpret(...)``, then
    ``run(*inputs)`` gives the outputs as numpy arrays.

    ``what``: a :class:`Spec` (its whole model), a block of a loaded spec, or a block name with
    ``spec=``. Sizes: ``env``, or ``preset`` (default ``tiny``) plus ``sizes``/``constants``,
    bound over the whole spec exactly as ``ncdc eval`` does. Other keywords (``params``,
    ``quant``, ``tape``, ``stand_in``, ``seed``) go to ``ncdc.interpreter.interpret``."""
    from ncdc.interpreter import interpret as _interpret

    morphism, owner = _target(what, spec)
    return _interpret(morphism, _env(morphism, owner, env, preset, sizes, constants), **kwargs)


def compile_torch(what, env=None, *, spec: Spec | None = None, preset: str | None = None,
                  sizes: Mapping[str, object] | None = None,
                  constants: Mapping[str, object] | None = None, quant: str = "exact",
                  dtype: str = "float64", module_name: str | None = None):
    """``(source, module)``: standalone PyTorch source for a spec or block, and an instance of
    its root ``nn.Module`` (in ``dtype``). Targets and sizes as for :func:`interpret`."""
    from ncdc.codegen import compile_torch as _compile

    morphism, owner = _target(what, spec)
    return _compile(morphism, _env(morphism, owner, env, preset, sizes, constants),
                    quant=quant, dtype=dtype, module_name=module_name,
                    size_names=owner.size_names() if owner is not None else None)


__all__ = ["DEFAULT_PRESET", "PRESETS", "Binding", "Block", "Diagnostic", "Spec",
           "bundled_spec_path", "compile_torch", "interpret", "load", "spec_of"]
