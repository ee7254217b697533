"""PyTorch code generation: any morphism of the IR becomes a standalone ``nn.Module`` source.

    >>> import ncdc
    >>> from ncdc import codegen
    >>> spec = ncdc.load(); env = spec.bind("tiny").env
    >>> source, module = codegen.compile_torch(spec.block("Mixing Coefficients"), env)

One class per distinct block body (same tag and structure), a submodule per occurrence, a
``ModuleList`` loop per repeated block; tape slots travel in a ``tape`` dict; liveness masks
(``<name>_live``) exist only where a position can be dead. ``quant="emulate"`` rounds exactly as
the reference interpreter does (``interpreter/QUANT_POLICY.md``). Arrays on a top-k sparse axis
(the routed experts' ``[k/e, ...]``) are computed at the selected (token, expert) pairs only when
the selection gates their one use (``codegen/pairs.py``).

Every class allocates in ``__init__`` and initialises in ``reset_parameters()`` (meta-device
construction works); emulate-mode rounding is one ``self.held(x, format)`` call (the generated
base class ``Module``), the identity in exact mode, folded into the statement it rounds. Fixed arrays are computed by rule (the Engram primes) or are user data
(``E_cmp``, ``alpha``) that the module refuses to run without, unless it was loaded
(``load_interpreter_params``, ``load_state_dict``) or the constructor got ``stand_in=True``.
"""
from __future__ import annotations

import sys

from .generate import DTYPES, RUNTIME, Generated, generate, instantiate, load_module


def generate_source(morphism, env, *, quant: str = "exact",
                    dtype: str = "float64", module_name: str | None = None,
                    source_name: str | None = None, reading: str = "faithful",
                    runtime=()) -> str:
    """The generated Python source for ``morphism``, its sizes bound by ``env`` (``runtime``:
    the features it carries, :data:`generate.RUNTIME`; none by default)."""
    return generate(morphism, env, quant=quant, module_name=module_name,
                    source_name=source_name, reading=reading, runtime=runtime).source


def compile_torch(morphism, env, *, quant: str = "exact",
                  dtype: str = "float64", module_name: str | None = None, stand_in: bool = False,
                  reading: str = "faithful", size_names: dict | None = None,
                  runtime=("loader",)):
    """``(source, module)``: the generated source and an instance of its root class (in
    ``dtype``, constructed with the binding's sizes as defaults; ``stand_in``: seeded stand-ins
    for data only the user can supply, with a warning; ``runtime``: the features its file
    carries, by default the ``loader``, so :func:`load_interpreter_params` takes the
    interpreter's arrays)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
    g = generate(morphism, env, quant=quant, module_name=module_name, reading=reading,
                 size_names=size_names, runtime=runtime)
    mod = load_module(g.source)
    kwargs = {"quant": quant} if g.root.needs_quant else {}
    if g.root.needs_stand_in:
        kwargs["stand_in"] = stand_in
    return g.source, instantiate(mod, g.class_name, DTYPES[dtype], **kwargs)


def param_keys_of(module) -> dict[str, str]:
    """The ``PARAM_KEYS`` table of the file ``module``'s class was generated in."""
    return sys.modules[type(module).__module__].PARAM_KEYS


def load_interpreter_params(module, params):
    """Load interpreter-keyed arrays into a generated module (see the generated file's own
    ``load_interpreter_params``)."""
    return sys.modules[type(module).__module__].load_interpreter_params(module, params)


__all__ = [
    "RUNTIME",
    "Generated",
    "compile_torch",
    "generate",
    "generate_source",
    "load_interpreter_params",
    "param_keys_of",
]
