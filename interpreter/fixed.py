"""Fixed arrays the spec defines by rule, and seeded stand-ins for data it leaves to the user.

**Engram primes** ``p_{k}`` (docs/format.md §11.12): the ``|GK|`` successive primes after a start
``s``, increasing, whose sum must equal the table bound ``T_{k}`` under the env. The released
rule is ``s = 16,000,000`` (its 24 primes sum to 384,006,168 = ``T_1``). At other sizes the start
is derived generically: the window of ``|GK|`` consecutive primes whose sum is ``T_{k}`` is found
by sliding a window from ``T_{k} / |GK|`` (sums of consecutive-prime windows grow strictly with
the start, so the window is unique if it exists); the tiny preset's ``T_1 = 3828`` gives the 24
primes after 100. No such window, or a prime not below the array's natural bound ``\\bar p``, is
an :class:`~ir.errors.EvaluationError` naming the numbers.

**User data** (``E_cmp``, the hash multipliers ``\\alpha_{k}``, any other non-learned array
without a rule) has no values in the spec: it must be supplied, or — when the caller asks for
stand-ins — replaced by seeded values of the right type: naturals uniform below their bound,
multipliers ``\\alpha`` odd and below their bound.
"""
from __future__ import annotations

import re
import zlib

import numpy as np
import sympy

from ncdc.ir.datatypes import Natural, kind, strip
from ncdc.ir.env import Env
from ncdc.ir.errors import EvaluationError
from ncdc.ir.params import ParamSpec

RELEASED_PRIME_START = 16_000_000


def natural_bound(dt, env: Env) -> int:
    """The exclusive upper bound of a natural datatype, floored to an integer."""
    s = strip(dt)
    if not isinstance(s, Natural):
        raise TypeError("not a natural datatype")
    val = env.subs(s.max_value)
    try:
        return int(sympy.floor(val))
    except TypeError:
        raise EvaluationError(f"natural bound {sympy.sstr(s.max_value)} is not bound to a "
                              "number") from None


def key_rng(seed: int, key: str) -> np.random.Generator:
    """A generator seeded by ``seed`` and the parameter key (order independent)."""
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(key.encode("utf-8"))])


def _norm(text: str) -> str:
    return text.replace("{", "").replace("}", "").replace(" ", "").replace("\\", "")


def _subscript(label: str) -> str | None:
    m = re.fullmatch(r"p_\{?([^{}]+)\}?", label.strip())
    return m.group(1) if m else None


def primes_after(start: int, count: int) -> list[int]:
    out, p = [], start
    for _ in range(count):
        p = int(sympy.nextprime(p))
        out.append(p)
    return out


def prime_window(total: int, count: int) -> list[int] | None:
    """The ``count`` consecutive primes summing to ``total``, or None if there are none."""
    if count <= 0 or total < 2 * count:
        return None
    window = primes_after(max(1, total // count - 1), count)
    s = sum(window)
    if s < total:
        while s < total:
            nxt = int(sympy.nextprime(window[-1]))
            s += nxt - window.pop(0)
            window.append(nxt)
    else:
        while s > total and window[0] > 2:
            prv = int(sympy.prevprime(window[0]))
            s += prv - window.pop()
            window.insert(0, prv)
    return window if s == total else None


def engram_primes(spec: ParamSpec, env: Env) -> np.ndarray:
    """``p_{k}``: see the module docstring."""
    (n_expr,) = spec.shape
    count = env.size(n_expr)
    sub = _subscript(spec.operator.label)
    bound_sym = None
    for sym in env.values:
        if _norm(sym.label) == f"T_{_norm(sub or '')}":
            bound_sym = sym
    if bound_sym is None:
        raise EvaluationError(f"cannot derive {spec.key}: no size symbol T_{sub} is bound, so "
                              "the sum the primes must reach is unknown", spec.json_path,
                              spec.titles)
    total = env.size(bound_sym)
    released = primes_after(RELEASED_PRIME_START, count)
    primes = released if sum(released) == total else prime_window(total, count)
    if primes is None:
        raise EvaluationError(
            f"{spec.key}: no {count} consecutive primes sum to T_{sub} = {total} (the "
            f"released rule, the {count} primes after {RELEASED_PRIME_START:,}, sums to "
            f"{sum(released)})", spec.json_path, spec.titles)
    bound = natural_bound(spec.datatype, env)
    if primes[-1] >= bound:
        raise EvaluationError(f"{spec.key}: prime {primes[-1]} is not below the bound "
                              f"{bound} of its datatype {spec.datatype}", spec.json_path,
                              spec.titles)
    return np.asarray(primes, dtype=np.int64)


FIXED_RULES = {"p": engram_primes}
"""Name body of a FixedArray -> the function computing its value."""


def fixed_rule(spec: ParamSpec):
    """The rule computing ``spec``'s value, or None when it is user data."""
    if spec.role != "fixed":
        return None
    name = spec.operator.name
    return FIXED_RULES.get(name.body.strip() if name is not None else "")


def make_stand_in(spec: ParamSpec, shape: tuple[int, ...], env: Env, seed: int) -> np.ndarray:
    """A seeded stand-in for user data (see the module docstring)."""
    rng = key_rng(seed, spec.key)
    k = kind(spec.datatype)
    if k == "natural":
        bound = natural_bound(spec.datatype, env)
        if bound < 1:
            raise EvaluationError(f"{spec.key}: natural bound {bound} admits no value",
                                  spec.json_path, spec.titles)
        name = spec.operator.name
        if name is not None and "alpha" in name.body:
            if bound < 2:
                raise EvaluationError(f"{spec.key}: no odd natural below {bound}",
                                      spec.json_path, spec.titles)
            return (2 * rng.integers(0, bound // 2, size=shape, dtype=np.int64) + 1)
        return rng.integers(0, bound, size=shape, dtype=np.int64)
    if k == "complex":
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return rng.standard_normal(shape)
