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

from ncdc.ir.errors import BindingError, Diagnostic, SpecError, UsageError
from ncdc.ir.morphisms import Block, Morphism
from ncdc.ir.params import ParamSpec, param_specs
from ncdc.ir.walk import Site, blocks, walk
from ncdc.spec.bindings import PRESETS, Binding, bind
from ncdc.spec.checks_sites import all_sites
from ncdc.spec.checks_sizes import check_sizes
from ncdc.spec.envelope import split_address
from ncdc.spec.loader import Document, load_path
from ncdc.spec.validate import Checker, validate

from .naming import find, labels
from .preflight import require
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
         max_bytes: int | None = None, part: str | None = None) -> Spec:
    """Load a spec. ``path=None`` loads the bundled spec (salvaged, since it is truncated).
    A file larger than ``max_bytes`` (default 256 MiB) is refused before it is read.

    ``FILE#NAME`` (or ``part=NAME``) chooses one diagram of a bundle, or one root of a
    document whose ``data`` is a list (``FILE#INDEX``, ``FILE#NAME/INDEX``); a file holding
    several and named without one is refused, the error listing them (:mod:`spec.envelope`)."""
    if path is None:
        return Spec(load_path(bundled_spec_path(), salvage=True, part=part))
    file, named = split_address(os.fspath(path), os.path.exists)
    if named is not None and part is not None:
        raise ValueError("give the part in the path (FILE#NAME) or as part=, not both")
    return Spec(load_path(file, salvage=salvage, max_bytes=max_bytes,
                          part=part if named is None else named))


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


def _binding(morphism, spec, env, preset, sizes, constants) -> Binding:
    """The binding of ``morphism``: ``env`` as given, else bound over its spec's symbols (or
    its own free symbols when it belongs to no loaded spec)."""
    if env is not None:
        if sizes or constants or preset is not None:
            raise ValueError("give either env or preset/sizes/constants, not both")
        return Binding(env)
    scope = _scope(morphism, spec)
    if scope is not None:
        return _bind(*scope, preset or DEFAULT_PRESET, sizes, constants)
    from ncdc.interpreter.symbols import free_numerics

    return bind(free_numerics(morphism), preset or DEFAULT_PRESET, sizes, constants)


def refuse(diagnostics) -> None:
    """Raise the first error among ``diagnostics`` as the command line does: a
    :class:`~ir.errors.BindingError` for ``size-invalid``, else a
    :class:`~ir.errors.SpecError`, worded ``refused: <code>: <message>`` with a count of the
    others."""
    errors = [d for d in diagnostics if d.severity == "error"]
    if not errors:
        return
    d = errors[0]
    more = f" (and {len(errors) - 1} more; `ncdc validate` lists them)" \
        if len(errors) > 1 else ""
    cls = BindingError if d.code == "size-invalid" else SpecError
    raise cls(f"refused: {d.code}: {d.message}{more}", d.json_path, d.titles)


def _validate(morphism, owner: Spec | None, binding: Binding) -> list[Diagnostic]:
    """What ``ncdc validate`` reports under ``binding`` for what will run: the whole document
    when ``morphism`` is its spec's data (its repository's records included), else
    ``morphism`` itself, so a valid block of a spec with a problem elsewhere runs and a block
    with a problem of its own is refused."""
    if owner is not None and morphism is owner.data:
        return owner.validate(binding)
    return validate(morphism, binding)


def _held(dtype: str) -> str | None:
    """The weight format a module in torch ``dtype`` holds its learned arrays in (None:
    float64, as the estimate's default)."""
    return {"float64": None, "float32": "float32"}.get(dtype, "bfloat16")


def _gate(morphism, owner: Spec | None, binding: Binding, *, command: str,
          max_memory: str | int | None, held: str | None, unsafe: bool) -> None:
    """The checks every entry point runs before allocating: the size gate
    (:func:`_size_gate`, always), then, unless ``unsafe``, the validation the command line
    runs (:func:`refuse` of :func:`_validate`) and the memory preflight
    (:mod:`ncdc.preflight`, a :class:`~ncdc.preflight.MemoryBudgetError` when the estimate
    exceeds ``max_memory`` or the memory available)."""
    _size_gate(morphism, binding)
    if unsafe:
        return
    refuse(_validate(morphism, owner, binding))
    require(morphism, binding.env, command=command, max_memory=max_memory, held=held)


def _size_gate(morphism, binding: Binding) -> None:
    """Refuse what the command line's gate refuses for sizes (:mod:`spec.checks_sizes`, code
    ``size-invalid``: negative, non-integral or out-of-int64 sizes, arrays past ``2**63 - 1``
    elements, repetitions past the limit) with the same typed error, a
    :class:`~ir.errors.BindingError` ``refused: size-invalid: ...``, before any allocation."""
    ck = Checker(binding)
    try:
        sites = list(all_sites(morphism))
    except RecursionError:
        return                          # a term too deep: validation reports it, typed
    check_sizes(ck, sites, binding)
    refuse(ck.out)


def interpret(what, env=None, *, spec: Spec | None = None, preset: str | None = None,
              sizes: Mapping[str, object] | None = None,
              constants: Mapping[str, object] | None = None,
              max_memory: str | int | None = None, unsafe_skip_checks: bool = False,
              **kwargs):
    """The reference numpy interpreter, ready to run: ``run = interpret(...)``, then
    ``run(*inputs)`` gives the outputs as numpy arrays.

    ``what``: a :class:`Spec` (its whole model), a block of a loaded spec, or a block name with
    ``spec=``. Sizes: ``env``, or ``preset`` (default ``tiny``) plus ``sizes``/``constants``,
    bound over the whole spec exactly as ``ncdc eval`` does. The gate of ``ncdc eval`` runs
    first: what ``ncdc validate`` reports as an error under that binding, in what will run (a
    spec's whole document; a block by itself), is refused with the same typed error, and a run the memory estimate says would exceed ``max_memory`` (e.g.
    ``"2GiB"``) or the memory available is refused with a ``MemoryBudgetError``.
    ``unsafe_skip_checks=True`` skips validation and the estimate (the size gate still runs):
    the interpreter then meets whatever the spec holds. Other keywords (``params``, ``quant``,
    ``tape``, ``stand_in``, ``seed``) go to ``ncdc.interpreter.interpret``."""
    from ncdc.interpreter import interpret as _interpret

    morphism, owner = _target(what, spec)
    binding = _binding(morphism, owner, env, preset, sizes, constants)
    _gate(morphism, owner, binding, command="interpret", max_memory=max_memory, held=None,
          unsafe=unsafe_skip_checks)
    return _interpret(morphism, binding.env, **kwargs)


def compile_torch(what, env=None, *, spec: Spec | None = None, preset: str | None = None,
                  sizes: Mapping[str, object] | None = None,
                  constants: Mapping[str, object] | None = None, quant: str = "exact",
                  dtype: str = "float64", module_name: str | None = None,
                  max_memory: str | int | None = None, unsafe_skip_checks: bool = False,
                  runtime="loader"):
    """``(source, module)``: standalone PyTorch source for a spec or block, and an instance of
    its root ``nn.Module`` (in ``dtype``). Targets, sizes and the gate as for
    :func:`interpret`; the memory estimate counts the module's parameters at ``dtype``'s
    width and the activations of one forward pass. ``runtime``: the features the file carries
    besides the model (names of ``ncdc.codegen.RUNTIME``, comma-separated or an iterable, or
    ``"all"``; as ``ncdc compile --with``); an unknown one is a :class:`UsageError`."""
    from ncdc.codegen import compile_torch as _compile
    from ncdc.codegen.generate import runtime_features

    try:
        features = runtime_features(runtime)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"runtime: {exc}") from None
    morphism, owner = _target(what, spec)
    binding = _binding(morphism, owner, env, preset, sizes, constants)
    _gate(morphism, owner, binding, command="compile_torch", max_memory=max_memory,
          held=_held(dtype), unsafe=unsafe_skip_checks)
    return _compile(morphism, binding.env, quant=quant, dtype=dtype, module_name=module_name,
                    size_names=owner.size_names() if owner is not None else None,
                    runtime=features)


__all__ = ["DEFAULT_PRESET", "PRESETS", "Binding", "Block", "Diagnostic", "Spec",
           "bundled_spec_path", "compile_torch", "interpret", "load", "refuse", "spec_of"]
