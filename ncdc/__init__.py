"""ncdc: the neural-circuit-diagram compiler.

``load`` a pyncd spec into a typed IR, ``Spec.validate`` it, ``interpret`` any block with the
numpy reference interpreter, and ``compile_torch`` it to standalone PyTorch source.

The design's top-level folders are installed as subpackages: ``ncdc.spec``, ``ncdc.ir``,
``ncdc.interpreter`` and ``ncdc.codegen`` (pyproject's package-dir map; in a checkout the
editable install maps them to ``spec/``, ``ir/``, ... beside ``ncdc/``). Public names are
imported lazily on first use, so ``import ncdc`` (and ``ncdc --help``) stays cheap and importing
``ncdc.ir`` never pulls in numpy or torch.
"""
from __future__ import annotations

import importlib

__version__ = "0.2.0"

# public name -> module that defines it
_EXPORTS = {
    # loading, binding, running
    "Spec": "ncdc.api",
    "load": "ncdc.api",
    "bundled_spec_path": "ncdc.api",
    "interpret": "ncdc.api",
    "compile_torch": "ncdc.api",
    "spec_of": "ncdc.api",
    "DEFAULT_PRESET": "ncdc.api",
    "PRESETS": "ncdc.spec.bindings",
    "Binding": "ncdc.spec.bindings",
    "Env": "ncdc.ir.env",
    "Site": "ncdc.ir.walk",
    "ParamSpec": "ncdc.ir.params",
    "Interpreted": "ncdc.interpreter.api",
    "Evaluation": "ncdc.interpreter.api",
    # what validation returns and what ncdc raises
    "Diagnostic": "ncdc.ir.errors",
    "SpecError": "ncdc.ir.errors",
    "SpecFormatError": "ncdc.ir.errors",
    "SpecDecodeError": "ncdc.ir.errors",
    "SpecTypeError": "ncdc.ir.errors",
    "TruncatedError": "ncdc.ir.errors",
    "BindingError": "ncdc.ir.errors",
    "EvaluationError": "ncdc.ir.errors",
    "DistributedError": "ncdc.ir.errors",
    "DistributedTimeout": "ncdc.ir.errors",
    "BlockLookupError": "ncdc.naming",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ncdc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "DEFAULT_PRESET",
    "PRESETS",
    "Binding",
    "BindingError",
    "BlockLookupError",
    "Diagnostic",
    "DistributedError",
    "DistributedTimeout",
    "Env",
    "Evaluation",
    "EvaluationError",
    "Interpreted",
    "ParamSpec",
    "Site",
    "Spec",
    "SpecDecodeError",
    "SpecError",
    "SpecFormatError",
    "SpecTypeError",
    "TruncatedError",
    "__version__",
    "bundled_spec_path",
    "compile_torch",
    "interpret",
    "load",
    "spec_of",
]
