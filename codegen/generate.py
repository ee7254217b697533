"""Assembling a standalone PyTorch file for a morphism, and loading it as a module."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import sys
import types
from collections.abc import Mapping
from importlib import resources

import sympy

from ncdc.ir.env import Env
from ncdc.ir.errors import SpecError
from ncdc.ir.lazy import lazy_module
from ncdc.ir.morphisms import Block, Morphism, Truncated
from ncdc.ir.names import plain_title
from ncdc.ir.numeric import FreeNumeric
from ncdc.ir.params import param_specs, repetitions
from ncdc.ir.pipeline import normalize
from ncdc.ir.walk import walk

from .bodies import merge_bodies
from .boundary import input_statics
from .class_source import base_class_source
from .classinfo import INDENT, ClassInfo, Param
from .config import config_source
from .decoder import decoder_methods
from .generator import Generator
from .gradients import unreached_sites
from .lower import ClassBuilder
from .names import class_name as to_class_name
from .names import comment_text, docstring, string_literal
from .storage import MemberFormats, stored_loader, verify

torch = lazy_module("torch")


class _Dtypes(Mapping):
    """dtype name -> torch dtype, looked up when asked (importing this module loads no torch)."""

    NAMES = ("float64", "float32", "bfloat16", "float16")

    def __getitem__(self, name: str):
        if name not in self.NAMES:
            raise KeyError(name)
        return getattr(torch, name)

    def __iter__(self):
        return iter(self.NAMES)

    def __len__(self) -> int:
        return len(self.NAMES)


DTYPES = _Dtypes()
_counter = itertools.count()


def collect_symbols(root) -> list[FreeNumeric]:
    """Every free numeric a term mentions (sizes, strides, shifts, constants, formulas)."""
    found: dict[int, FreeNumeric] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if isinstance(obj, sympy.Basic):
            for s in obj.free_symbols:
                if isinstance(s, FreeNumeric):
                    found[s.uid] = s
            continue
        if obj is None or isinstance(obj, (str, int, float, bool)):
            continue
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (tuple, list)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                if f.name != "path":
                    stack.append(getattr(obj, f.name))
    return [found[k] for k in sorted(found)]


def data_symbols(root: Morphism, specs) -> set[FreeNumeric]:
    """Sizes fixed only by the data: symbols with no value stated in the spec that size an
    axis of the root's inputs and no parameter (``specs``: the root's parameters) (one module
    then serves any token count)."""
    fixed: set = set()
    for p in specs:
        for s in p.shape:
            fixed |= {x for x in sympy.sympify(s).free_symbols if isinstance(x, FreeNumeric)}
    for site_tag in _repetition_symbols(root):
        fixed |= site_tag
    out = set()
    for arr in root.dom:
        for axis in arr.shape:
            for s in sympy.sympify(axis.size).free_symbols:
                if isinstance(s, FreeNumeric) and s.default is None and s not in fixed:
                    out.add(s)
    return out


def _repetition_symbols(root):
    for site in walk(root):
        if isinstance(site.node, Block):
            rep = sympy.sympify(site.node.tag.repetition)
            yield {x for x in rep.free_symbols if isinstance(x, FreeNumeric)}


def _prelude(name: str) -> tuple[list[str], str]:
    """(import lines, code after the imports) of a prelude module, the code verbatim."""
    text = resources.files("ncdc.codegen").joinpath("prelude", f"{name}.py").read_text("utf-8")
    tree = ast.parse(text)
    imports, start = [], None
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.get_source_segment(text, node))
            continue
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str) and start is None):
            continue
        start = node.lineno if start is None else start
    lines = text.splitlines()
    body = "\n".join(lines[start - 1:]).rstrip() + "\n"
    # names a prelude reads from the generated file (PARAM_KEYS) are defined once pasted
    return imports, body.replace("  # noqa: F821", "")


PRELUDE_TITLES = {
    "linear": "the spec's Linear layers, small 16-bit CPU products",
    "storage": "weights held in storage formats, dequantized at use",
    "quant": "rounding to storage formats (emulate mode)",
    "views": "affine reads and writes of trailing dims",
    "chunks": "a block run over chunks of its token axis",
    "pairs": "arrays on a sparse axis at its live pairs only",
    "fixed": "fixed arrays: computed by rule, or data the user supplies",
    "decoding": "decoding a few tokens at a time: prefill and step",
    "distributed": "sharding over several processes (experts, FSDP2)",
}


RUNTIME = {
    "loader": "PARAM_KEYS, PARAM_LAYOUT and load_interpreter_params: weights keyed like the "
              "reference interpreter",
    "decoding": "prefill and step on the root class: decoding a few tokens at a time",
    "distributed": "shard, load_shard, gather_full: experts and FSDP2 over several processes "
                   "(brings the loader)",
}
"""The runtime features a generated file carries only on request (``generate(runtime=...)``,
``ncdc compile --with``): each brings its prelude and the methods and tables it needs; a model
without one has none of its methods (``model.step`` without ``decoding`` does not exist)."""


def runtime_features(names) -> frozenset[str]:
    """The features ``names`` asks for (an iterable of :data:`RUNTIME` names, or ``"all"``),
    with the ones they bring (``distributed`` reads the loader's tables)."""
    if isinstance(names, str):
        names = RUNTIME if names == "all" else [n for n in names.split(",") if n]
    chosen = frozenset(names)
    unknown = sorted(chosen - set(RUNTIME))
    if unknown:
        raise ValueError(f"unknown runtime feature {unknown[0]!r}; choose from "
                         f"{', '.join(RUNTIME)} or all")
    return chosen | ({"loader"} if "distributed" in chosen else set())


PRELUDE_ORDER = ("linear", "storage", "quant", "views", "chunks", "pairs", "fixed", "decoding")
"""The preludes pasted before the classes, in file order (``distributed`` comes last)."""


def _pasted(name: str, code: str, whole: bool = True) -> str:
    """A prelude's code under a heading naming its file (``in part``: only the definitions the
    generated file uses, each verbatim)."""
    part = "" if whole else ", in part"
    return f"# ---- {PRELUDE_TITLES[name]} (codegen/prelude/{name}.py{part}) ----\n\n\n" + code


def _definitions(name: str) -> list[tuple[frozenset, frozenset, str]]:
    """(names bound, global names read, text) of every top-level statement of a prelude after
    its imports, in file order; the text starts at the comment lines right above it and takes
    the docstring of an assignment (a string right below it) with it."""
    code = _prelude(name)[1]
    lines = code.splitlines()
    out = []
    for node in ast.parse(code).body:
        if out and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            binds, reads, text = out[-1]
            out[-1] = (binds, reads, "\n".join([text, *lines[node.lineno - 1:node.end_lineno]]))
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        while start > 1 and lines[start - 2].startswith("#"):
            start -= 1
        declared = {n for g in ast.walk(node) if isinstance(g, ast.Global) for n in g.names}
        out.append((frozenset(_defined(ast.Module([node], []))), frozenset(_read(node) | declared),
                    "\n".join(lines[start - 1:node.end_lineno])))
    return out


def _defined(tree: ast.Module) -> set[str]:
    """The top-level names a module binds (functions, classes, assignments)."""
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return out


def _read(tree: ast.AST) -> set[str]:
    """The global names ``tree`` reads: in each outermost function, the names it loads and
    neither binds nor takes as an argument (a local that shares a helper's name is no use)."""
    out: set[str] = set()

    def visit(node, local: frozenset):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = set(local)
            for n in ast.walk(node):
                if isinstance(n, ast.arg):
                    inner.add(n.arg)
                elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                    inner.add(n.id)
                elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not node:
                    inner.add(n.name)
            local = frozenset(inner)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            out.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child, local)

    visit(tree, frozenset())
    return out


def used_definitions(parts: list[str]) -> dict[str, tuple[list[str], bool]]:
    """Prelude of :data:`PRELUDE_ORDER` -> (the texts of its top-level definitions, in file
    order, that ``parts``, the file's own code: classes, tables, loader, sharding, read a name
    of, directly or through other definitions; whether that is all of them); preludes with none
    are left out."""
    defs = {n: _definitions(n) for n in PRELUDE_ORDER}
    wanted = set().union(*(_read(ast.parse(p)) for p in parts))
    chosen: set[tuple[str, int]] = set()
    grew = True
    while grew:
        grew = False
        for n, found in defs.items():
            for i, (binds, reads, _) in enumerate(found):
                if (n, i) not in chosen and binds & wanted:
                    chosen.add((n, i))
                    wanted |= reads
                    grew = True
    out = {}
    for n, found in defs.items():
        texts = [text for i, (_, _, text) in enumerate(found) if (n, i) in chosen]
        if texts:
            out[n] = (texts, len(texts) == len(found))
    return out


def used_preludes(parts: list[str]) -> set[str]:
    """The preludes :func:`used_definitions` takes definitions from."""
    return set(used_definitions(parts))


@dataclasses.dataclass
class Generated:
    source: str
    root: ClassInfo
    param_keys: dict[str, str]
    class_name: str
    slot_keys: dict[int, str] = dataclasses.field(default_factory=dict)
    stored: dict[str, str] = dataclasses.field(default_factory=dict)
    """PARAM_KEYS names held in a storage format (a StoredWeight) -> the format."""
    config_name: str = "Config"
    """The file's config dataclass (every module takes an instance, or None for defaults)."""
    config_fields: dict = dataclasses.field(default_factory=dict)
    """Config field name -> the size or constant symbol it holds."""
    runtime: frozenset = frozenset()
    """The runtime features the file carries (:data:`RUNTIME`)."""

    def load_params(self, module, params) -> None:
        """Copy interpreter-keyed arrays into an instance of this file's root class (with the
        file's own ``load_interpreter_params``: layouts, shape checks; the file must carry the
        ``loader``)."""
        if "loader" not in self.runtime:
            raise ValueError("the generated file carries no loader: generate it with "
                             "runtime={'loader'}")
        try:
            sys.modules[type(module).__module__].load_interpreter_params(module, params)
        except (KeyError, ValueError) as exc:
            raise SpecError(str(exc)) from None


def _root_title(morphism, module_name) -> tuple[str, str | None, str | None]:
    if isinstance(morphism, Block):
        return morphism.tag.title, morphism.tag.description, morphism.tag.formula
    return module_name or "Model", None, None


def generate(morphism: Morphism, env: Env, *, quant: str = "exact",
             module_name: str | None = None, source_name: str | None = None,
             reading: str = "faithful", weights=None,
             size_names: dict | None = None, runtime=()) -> Generated:
    """Generate the source of a standalone module computing ``morphism`` under ``env``
    (``reading``: ``faithful`` or ``pyncd``, :mod:`ir.readings`; the term is normalized
    first, :func:`ir.pipeline.normalize`, with the ``contraction_view`` fusion; ``weights``:
    a storage policy, ``format_for(key)``, whose weights the module holds in storage formats,
    :mod:`codegen.storage`; ``size_names``: symbol -> readable name, ``k@L_{q}`` where labels
    are shared, which names the config's fields; ``runtime``: the :data:`RUNTIME` features the
    file carries, none by default)."""
    features = runtime_features(runtime)
    if quant not in ("exact", "emulate"):
        raise ValueError(f"quant must be 'exact' or 'emulate', not {quant!r}")
    if isinstance(morphism, Truncated):
        raise SpecError("cannot compile a truncated term; compile a complete block or the "
                        "salvaged prefix", morphism.path)
    morphism = normalize(morphism, reading=reading, fusion="contraction_view")  # once
    symbols = collect_symbols(morphism)
    specs = param_specs(morphism, env)  # once: each use below reads this list
    gen = Generator(env, data_symbols(morphism, specs), quant, symbols, size_names)
    gen.runtime = features
    gen.weight_formats = MemberFormats(specs, weights, gen.key_of)
    dead = unreached_sites(morphism, [p.site for p in specs])
    gen.no_gradient = ({gen.key_of(p.site) for p in specs if id(p.site) in dead}
                       - {gen.key_of(p.site) for p in specs if id(p.site) not in dead})
    title, description, formula = _root_title(morphism, module_name)

    def make(excluded):
        name = gen.class_names.fresh(to_class_name(plain_title(title), "Model"), sep="")
        gen.config_name = gen.class_names.fresh(name + "Config", sep="")
        info = ClassInfo(key="root", name=name)
        builder = ClassBuilder(gen, info, title=title, description=description, formula=formula,
                               excluded=excluded)
        builder.iface.optional_masks = True  # <input>_live=None at the boundary (codegen/boundary.py)
        body = morphism
        if isinstance(morphism, Block) and repetitions(morphism, env) == 1:
            body = morphism.body
        builder.build(body, list(morphism.dom), input_statics(gen, morphism.dom), {})
        return info

    info = gen.build_class(make)
    merge_bodies(gen, info)
    if "decoding" in features:
        info.source = info.source.rstrip("\n") + "\n" + decoder_methods(gen, morphism, INDENT)
    name = info.name
    keys = param_keys(gen, info, specs)
    formats = {name: fmt for name, fmt in member_formats(info)}
    if weights is not None:
        verify(weights, keys, formats, specs)
    if any(formats.values()):
        gen.prelude.add("storage")
    source = assemble(gen, info, keys, title, source_name)
    check_source(source)
    fields = {gen.sym_name(s): s for s in info.ctor_symbols}
    return Generated(source, info, keys, name, dict(gen.slot_keys),
                     {k: f for k, f in formats.items() if f is not None}, gen.config_name, fields,
                     features)


def instance_params(info: ClassInfo, prefix: str = ""):
    """(state_dict key, site, role) of every parameter and buffer, in IR pre-order."""
    for key, p in params_by_key(info, prefix):
        yield key, p.site, p.role


def params_by_key(info: ClassInfo, prefix: str = "", body: ClassInfo | None = None):
    """(state_dict key, Param) of every parameter and buffer, in IR pre-order (``body``: the
    class of the submodule ``info``'s constructor takes, codegen/bodies.py)."""
    for m in info.members:
        if isinstance(m, Param):
            yield prefix + m.attr, m
            continue
        cls, inner = (body, None) if m.info is None else (m.info, m.body)
        if m.repeat is not None:
            for i in range(m.repeat):
                yield from params_by_key(cls, f"{prefix}{m.attr}.{i}.", inner)
        else:
            yield from params_by_key(cls, f"{prefix}{m.attr}.", inner)


def member_formats(info: ClassInfo, prefix: str = ""):
    """(state_dict key, storage format or None) of every parameter and buffer, in IR
    pre-order."""
    return ((key, p.format) for key, p in params_by_key(info, prefix))


def param_layouts(info: ClassInfo, prefix: str = ""):
    """(state_dict key, layout) of every nn.Linear parameter."""
    return ((key, p.layout) for key, p in params_by_key(info, prefix) if p.layout is not None)


def param_keys(gen: Generator, info: ClassInfo, specs) -> dict[str, str]:
    """state_dict key -> the interpreter's parameter key (``specs``: the root's
    :func:`ir.params.param_specs`)."""
    ours = list(instance_params(info))
    if len(ours) != len(specs):
        raise SpecError(f"internal: the generated module holds {len(ours)} parameters but the "
                        f"spec has {len(specs)}")
    out = {}
    for (name, site, role), spec in zip(ours, specs, strict=False):
        if spec.role != role or (spec.site is not site
                                 and gen.key_of(spec.site) != gen.key_of(site)):
            raise SpecError(f"internal: parameter {name} does not line up with {spec.key}")
        out[name] = spec.key
    return out


def assemble(gen: Generator, root: ClassInfo, keys: dict[str, str], title: str,
             source_name: str | None) -> str:
    """The file: docstring, imports, config, the preludes its code reads, the classes, then the
    requested runtime (``gen.runtime``): the loader's tables and function, the sharding."""
    head = f"{plain_title(title)}: PyTorch code generated by ncdc"
    if source_name:
        head += f" from {source_name}"
    doc = (head + ".\n\nStandalone: imports only torch and the standard library. Arrays carry "
           "their axes last;\nany number of leading (batch) dims is allowed.\n")
    if "loader" in gen.runtime:
        doc += ("`load_interpreter_params(module, params)` loads weights keyed like ncdc's "
                "reference\ninterpreter (see PARAM_KEYS).\n")
    config = config_source(gen, gen.config_name, root.ctor_symbols, plain_title(title))
    body_parts = [base_class_source("quant" in gen.prelude, gen.config_name,
                                    tuple(i.source for i in gen.order if i.method))]
    body_parts += [info.source for info in gen.order if not info.method]
    body_parts.append(root.source)
    if "loader" in gen.runtime:
        body_parts += loader_parts(keys, dict(param_layouts(root)), "storage" in gen.prelude)
    tail = []
    if "distributed" in gen.runtime:
        # sharding comes last: it reads the tables above (codegen/prelude/distributed.py)
        tail.append(_pasted("distributed", _prelude("distributed")[1]))
    pasted = [_pasted(n, "\n\n\n".join(texts), whole)
              for n, (texts, whole) in used_definitions(body_parts + tail).items()]
    body_parts = [config] + pasted + body_parts + tail
    body = "\n\n".join(p.rstrip("\n") + "\n" for p in body_parts)
    used = {n.id for n in ast.walk(ast.parse(body)) if isinstance(n, ast.Name)}
    imports = [f"import {name}" for name in ("functools", "math", "warnings") if name in used]
    imports.append("from dataclasses import dataclass")
    imports.append("")
    imports.append("import torch")
    if "dist" in used:
        imports.append("import torch.distributed as dist")
    if "F" in used:
        imports.append("import torch.nn.functional as F")
    imports.append("from torch import nn")
    if imports[0] == "":
        imports = imports[1:]
    after = "\n\n" if body_parts[0].startswith("#") else "\n\n\n"
    text = docstring(doc, "") + "\n\n" + "\n".join(imports) + after + "\n\n".join(
        p.rstrip("\n") + "\n" for p in body_parts)
    return _at_most_two_blank_lines(text)


def loader_parts(keys: dict[str, str], layouts: dict, stored: bool) -> list[str]:
    """The ``loader`` feature's code: the ``PARAM_KEYS`` and ``PARAM_LAYOUT`` tables and
    ``load_interpreter_params`` (encoding StoredWeights where the file holds them)."""
    keys_lines = ["PARAM_KEYS = {"]
    for k, v in keys.items():
        keys_lines.append(f"    {string_literal(k)}: {string_literal(v)},")
    keys_lines.append("}")
    keys_lines.append('"""state_dict key -> parameter key of the reference interpreter."""')
    layout_lines = ["PARAM_LAYOUT = {"] + [f"    {string_literal(k)}: {v!r}," for k, v in
                                           layouts.items()] + ["}"]
    layout_lines.append('"""Linear weights stored as nn.Linear\'s [out, in] (nn.Linear layers and '
                        'grouped projections):\n(input dims, output dims) of the interpreter\'s '
                        '[in..., out...] weight (or [out...] bias, input\ndims 0), stored flattened '
                        'as [out, in] (or [out]); every other array is stored as the\n'
                        'interpreter holds it."""')
    return ["\n".join(keys_lines) + "\n" if keys else "PARAM_KEYS: dict[str, str] = {}\n",
            "\n".join(layout_lines) + "\n" if layouts else
            "PARAM_LAYOUT: dict[str, tuple[int, int]] = {}\n",
            stored_loader(LOADER) if stored else LOADER]


def _at_most_two_blank_lines(text: str) -> str:
    while "\n\n\n\n" in text:
        text = text.replace("\n\n\n\n", "\n\n\n")
    return text


LOADER = '''def load_interpreter_params(module, params):
    """Copy arrays keyed like the reference interpreter (``params[key]``, any array-like) into
    ``module``'s parameters and buffers, checking every shape."""
    state = module.state_dict()
    missing = [key for key in PARAM_KEYS.values() if key not in params]
    if missing:
        raise KeyError(f"no array for {missing[0]!r} ({len(missing)} missing)")
    with torch.no_grad():
        for name, key in PARAM_KEYS.items():
            target = state[name]
            value = torch.as_tensor(params[key])
            if value.is_complex() and not target.is_complex():
                raise TypeError(f"{key}: complex values for a real array")
            if not (value.is_floating_point() or value.is_complex()
                    or value.dtype in (torch.int64, torch.int32, torch.int16, torch.int8,
                                       torch.uint8, torch.bool)):
                raise TypeError(f"{key}: dtype {value.dtype} is not numeric")
            if not target.is_floating_point() and not target.is_complex() and (
                    value.is_floating_point() and not bool((value == value.round()).all())):
                raise TypeError(f"{key}: non-integral values for an integer array")
            if name in PARAM_LAYOUT:  # [in..., out...] -> nn.Linear's [out, in] (bias: [out])
                n_in, n_out = PARAM_LAYOUT[name]
                if (value.dim() != n_in + n_out or value.numel() != target.numel()
                        or math.prod(value.shape[n_in:]) != target.shape[0]):
                    raise ValueError(f"{key}: shape {tuple(value.shape)} does not flatten to "
                                     f"{tuple(target.shape)}")
                value = value.reshape(-1, target.shape[0]).T if n_in else value.reshape(-1)
            if tuple(value.shape) != tuple(target.shape):
                raise ValueError(f"{key}: shape {tuple(value.shape)}, expected "
                                 f"{tuple(target.shape)}")
            target.copy_(value.to(target.dtype))
    for m in module.modules():
        if hasattr(m, "data_missing"):
            m.data_missing = False
    return module
'''


def check_source(source: str) -> None:
    """The emitted text must parse, and import nothing but torch and the standard library."""
    tree = ast.parse(source)
    allowed = {"torch", "math", "functools", "warnings", "dataclasses"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [(node.module or "").split(".")[0]]
        else:
            continue
        bad = [n for n in names if n not in allowed]
        if bad:
            raise AssertionError(f"generated code imports {bad[0]}")


def load_module(source: str, name: str | None = None) -> types.ModuleType:
    """Execute generated source as a fresh Python module (registered in ``sys.modules``)."""
    mod_name = name or f"ncdc_generated_{next(_counter)}"
    mod = types.ModuleType(mod_name)
    mod.__file__ = f"<{mod_name}>"
    sys.modules[mod_name] = mod
    # the source is our own output, checked by check_source (spec text only in literals)
    exec(compile(source, mod.__file__, "exec"), mod.__dict__)  # noqa: S102
    return mod


def instantiate(module: types.ModuleType, class_name: str, dtype: torch.dtype, **kwargs):
    """Construct the root class with ``dtype`` as the default float type (tables computed in
    the constructor follow it), then move every floating tensor to ``dtype``. The caller loads
    what it builds: user data not stood in for (``stand_in`` False or absent, where the class
    takes it) is constructed as ``stand_in="load"``."""
    cls = getattr(module, class_name)
    if not kwargs.get("stand_in") and "stand_in" in inspect.signature(cls).parameters:
        kwargs["stand_in"] = "load"
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype if dtype in (torch.float32, torch.float64) else old)
    try:
        obj = cls(**kwargs)
    finally:
        torch.set_default_dtype(old)
    return obj.to(dtype)


__all__ = [
    "DTYPES",
    "INDENT",
    "Generated",
    "comment_text",
    "generate",
    "instantiate",
    "load_module",
]
