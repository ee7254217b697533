"""The numpy reference interpreter: evaluates any morphism of the IR exactly as
``docs/format.md`` defines (positional arrays, lifting over the degree, affine reindexings with
liveness, covariant scatters, repetition, the tape), in ``exact`` (float64/int64/complex128)
or ``emulate`` (rounding per ``QUANT_POLICY.md``) mode.

    >>> import ncdc
    >>> from ncdc import interpreter
    >>> spec = ncdc.load(); b = spec.bind("tiny")
    >>> run = interpreter.interpret(spec.block("Mixing Coefficients"), b.env)
    >>> pre, post, comb = run(x)            # numpy arrays in cod order

See ``READINGS.md`` for every reading chosen where docs/format.md is silent.
"""
from . import rules  # noqa: F401  (registers every rule)
from .api import Evaluation, Interpreted, interpret, prefix
from .inputs import random_inputs, random_tape, tape_needs
from .params import Params, init_params
from .registry import RULES
from .values import Value

__all__ = [
           "RULES",
           "Evaluation",
           "Interpreted",
           "Params",
           "Value",
           "init_params",
           "interpret",
           "prefix",
           "random_inputs",
           "random_tape",
           "tape_needs",
]
