"""ncdc: the neural-circuit-diagram compiler.

``load`` a pyncd spec into a typed IR, ``Spec.validate`` it, ``interpret`` any block with the
numpy reference interpreter, and ``compile_torch`` it to standalone PyTorch source.
"""
from .api import Spec, bundled_spec_path, load


def interpret(block, **kwargs):
    """See :func:`interpreter.interpret`."""
    from interpreter import interpret as _interpret

    return _interpret(block, **kwargs)


def compile_torch(block, **kwargs):
    """See :func:`codegen.compile_torch`."""
    from codegen import compile_torch as _compile

    return _compile(block, **kwargs)


__all__ = ["Spec", "bundled_spec_path", "compile_torch", "interpret", "load"]
