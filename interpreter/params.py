"""Parameters of an evaluation: which arrays each operator occurrence reads, their seeded
initialisation, and validation of user-supplied arrays.

Keys are exactly those of :func:`ir.params.param_specs` for the morphism being interpreted (the
interpreter calls it once and never builds a key itself). At run time an occurrence is found
by ``(id(broadcasted), titles)`` — ``titles`` being the key segments of the enclosing blocks,
tracked by the evaluator with the same helpers (``block_segments``, ``titled_children``) — plus
a pre-order counter for the rare case of one term appearing twice under the same titles. So the
two can never silently disagree: a site the table does not know is an internal error.

Initialisation (seeded per key, independent of order; keeps activations finite and O(1) through
a layer): ``Linear`` weights ``N(0, 1/fan_in)`` with ``fan_in`` the product of the input target
sizes; ``Linear`` biases 0; input-less ``Linear`` arrays (``sink``, router ``bias``, Engram
``w_1``) 0; ``Normalize`` gains 1 and shifts 0; real ``Embedding`` tables ``N(0, 1)``; fixed
arrays by rule (:mod:`interpreter.fixed`); user data only as stand-ins when asked.
"""
from __future__ import annotations

import numpy as np

from ncdc.ir.datatypes import kind
from ncdc.ir.env import Env
from ncdc.ir.errors import EvaluationError
from ncdc.ir.params import ParamSpec, param_specs

from .fixed import fixed_rule, key_rng, make_stand_in
from .values import DTYPES, check_allocation


class Params(dict):
    """``key -> ndarray``; ``stand_ins`` lists the keys filled with seeded stand-ins and
    ``computed`` those computed by a fixed-array rule."""

    def __init__(self, *args, stand_ins=(), computed=(), **kw):
        super().__init__(*args, **kw)
        self.stand_ins = list(stand_ins)
        self.computed = list(computed)


def expected_shape(spec: ParamSpec, env: Env) -> tuple[int, ...]:
    return tuple(env.size(s) for s in spec.shape)


def _describe(spec: ParamSpec, shape) -> str:
    return f"[{', '.join(f'{a}={n}' for a, n in zip(spec.axis_labels, shape, strict=False))}]"


def init_value(spec: ParamSpec, env: Env, seed: int) -> np.ndarray:
    """The seeded initial value of one learned array."""
    shape = expected_shape(spec, env)
    rng = key_rng(seed, spec.key)
    cplx = kind(spec.datatype) == "complex"

    def normal(scale):
        x = rng.standard_normal(shape) * scale
        return x + 1j * rng.standard_normal(shape) * scale if cplx else x

    if spec.role == "weight":
        site = spec.site
        fan_in = 1
        for w in site.input_weaves:
            fan_in *= int(np.prod(env.sizes(w.target), dtype=np.int64))
        if not site.input_weaves:
            return np.zeros(shape, dtype=np.complex128 if cplx else np.float64)
        return normal(1.0 / np.sqrt(max(fan_in, 1)))
    if spec.role in ("bias", "shift"):
        return np.zeros(shape, dtype=np.complex128 if cplx else np.float64)
    if spec.role == "gain":
        return np.ones(shape)
    if spec.role == "table":
        return normal(1.0)
    raise EvaluationError(f"no initialisation rule for {spec.key} (role {spec.role})",
                          spec.json_path, spec.titles)


def is_user_data(spec: ParamSpec) -> bool:
    return not spec.learned and fixed_rule(spec) is None


def build_params(specs: list[ParamSpec], env: Env, given: dict | None, seed: int = 0,
                 stand_in: bool = False) -> Params:
    """Every array ``specs`` need: taken from ``given`` (validated), computed by rule, seeded
    (only when ``given`` is None), or a stand-in for user data (only when ``stand_in``)."""
    out, stand_ins, computed = {}, [], []
    for spec in specs:
        shape = expected_shape(spec, env)
        check_allocation(shape, f"parameter {spec.key!r}", 16)
        if given is not None and spec.key in given:
            out[spec.key] = validate(spec, given[spec.key], shape)
            continue
        rule = fixed_rule(spec)
        if rule is not None:
            out[spec.key] = rule(spec, env)
            computed.append(spec.key)
        elif is_user_data(spec):
            if not stand_in:
                raise EvaluationError(
                    f"parameter {spec.key!r} {_describe(spec, shape)} of {spec.datatype} is "
                    "data the spec leaves to the user: supply it, or ask for a seeded stand-in "
                    "(stand_in=True / --stand-in)", spec.json_path, spec.titles)
            out[spec.key] = make_stand_in(spec, shape, env, seed)
            stand_ins.append(spec.key)
        elif given is None:
            out[spec.key] = init_value(spec, env, seed)
        else:
            raise EvaluationError(f"missing parameter {spec.key!r}: expected shape "
                                  f"{shape} {_describe(spec, shape)}", spec.json_path,
                                  spec.titles)
    return Params(out, stand_ins=stand_ins, computed=computed)


def validate(spec: ParamSpec, arr, shape: tuple[int, ...]) -> np.ndarray:
    """``arr`` as the parameter's storage dtype, or an error naming the key and shape."""
    a = np.asarray(arr)
    if a.shape != shape:
        raise EvaluationError(f"parameter {spec.key!r} has shape {a.shape}; expected "
                              f"{shape} {_describe(spec, shape)}", spec.json_path, spec.titles)
    want = DTYPES[kind(spec.datatype)]
    if want is np.int64:
        integral = np.issubdtype(a.dtype, np.integer) or (
            np.issubdtype(a.dtype, np.floating) and bool(np.all(np.rint(a) == a)))
        if not integral:
            raise EvaluationError(f"parameter {spec.key!r} must hold naturals "
                                  f"({spec.datatype}), got dtype {a.dtype}",
                                  spec.json_path, spec.titles)
        a = a.astype(np.int64)
        if a.size and a.min() < 0:
            raise EvaluationError(f"parameter {spec.key!r} holds a negative natural",
                                  spec.json_path, spec.titles)
        return a
    if np.iscomplexobj(a) and want is not np.complex128:
        raise EvaluationError(f"parameter {spec.key!r} must be real, got dtype {a.dtype}",
                              spec.json_path, spec.titles)
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        raise EvaluationError(f"parameter {spec.key!r} has non-numeric dtype {a.dtype}",
                              spec.json_path, spec.titles)
    return a.astype(want)


def init_params(morphism, env: Env, seed: int = 0, stand_in: bool = False) -> Params:
    """Seeded values for every parameter of ``morphism`` (keys of
    :func:`ir.params.param_specs`); fixed arrays computed by rule; user data is an error unless
    ``stand_in`` (then seeded stand-ins, listed in ``.stand_ins``)."""
    return build_params(param_specs(morphism, env), env, None, seed, stand_in)


class ParamTable:
    """The parameter specs of one root, grouped per occurrence of a Broadcasted."""

    def __init__(self, root, env: Env):
        self.specs = param_specs(root, env)
        self.groups: dict[tuple[int, tuple[str, ...]], list[dict[str, ParamSpec]]] = {}
        for p in self.specs:
            lst = self.groups.setdefault((id(p.site), tuple(p.titles)), [])
            if not lst or p.role in lst[-1]:
                lst.append({})
            lst[-1][p.role] = p

    def occurrence(self, site, titles: tuple[str, ...], index: int) -> dict[str, ParamSpec]:
        lst = self.groups.get((id(site), tuple(titles)))
        if lst is None or index >= len(lst):
            raise EvaluationError(
                "internal: the evaluator reached a parameter occurrence that "
                f"ir.params.param_specs does not list (titles {' / '.join(titles)})",
                site.path, titles)
        return lst[index]
