"""Checking generated modules against the reference interpreter, block by block.

For each morphism: the interpreter and the generated module run on the same seeded random
inputs, tape and parameters (the interpreter's, loaded through ``PARAM_KEYS``); outputs and
their liveness must agree — within a relative tolerance in ``exact`` mode (1e-10 in float64;
in a narrower dtype one derived per block from the dtype, :mod:`ncdc.verify.tolerance`), bit for bit
in ``emulate`` mode. In a narrower dtype both sides get inputs and parameters rounded to it, and a
block may be fed the inputs its context gives it (:mod:`ncdc.verify.recorded`). Under a storage
policy both sides hold the weights in its formats, and learned arrays that start as one value
(zero biases, unit gains) are drawn non-constant first, so that scale groups cut differently
would show.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np

from ncdc import interpreter
from ncdc.codegen.boundary import mask_names
from ncdc.codegen.generate import DTYPES, generate, instantiate, load_module
from ncdc.interpreter.storage_policy import apply_policy
from ncdc.ir.datatypes import kind, storage_encoding
from ncdc.ir.env import Env
from ncdc.ir.errors import UsageError
from ncdc.ir.lazy import lazy_module
from ncdc.ir.morphisms import Block
from ncdc.ir.params import param_specs
from ncdc.ir.readings import apply_reading

from . import tolerance as tol_

torch = lazy_module("torch")

TOLERANCE = {"float64": tol_.FLOAT64_TOLERANCE}
"""Fixed tolerances (float64 only); other dtypes: :func:`ncdc.verify.tolerance.tolerance`."""


@dataclass
class CheckResult:
    name: str
    path: str
    shapes: str
    max_abs: float = 0.0
    max_rel: float = 0.0
    interp_s: float = 0.0
    torch_s: float = 0.0
    ok: bool = True
    problem: str = ""
    tolerance: float = 0.0
    error_estimate: float = 0.0
    dims: str = ""
    details: list = field(default_factory=list)


class ModuleCache:
    """Generated modules per (structure, quant, dtype): ``ncdc check`` compiles each distinct
    block body once."""

    def __init__(self):
        self._mods: dict = {}

    def get(self, morphism, env: Env, quant: str, dtype: str, key: str | None = None,
            weights=None):
        k = (key, quant, dtype, weights) if key is not None else None
        if k is not None and k in self._mods:
            g, mod = self._mods[k]
        else:
            g = generate(morphism, env, quant=quant, weights=weights, runtime={"loader"})
            mod = load_module(g.source)
            if k is not None:
                self._mods[k] = (g, mod)
        kwargs = {"quant": quant} if g.root.needs_quant else {}
        return g, instantiate(mod, g.class_name, DTYPES[dtype], **kwargs)


def to_torch(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    t = torch.from_numpy(np.array(a, copy=True, order="C"))
    if t.is_floating_point():
        return t.to(dtype)
    if t.is_complex():
        return t.to(torch.complex128 if dtype == torch.float64 else torch.complex64)
    return t


def run_generated(g, module, inputs, tape, dtype: str, masks: dict | None = None):
    """Call a generated module with numpy inputs/tape (``masks``: mask argument name -> boolean
    array); (values, live) numpy pairs."""
    td = DTYPES[dtype]
    args = [to_torch(np.asarray(x), td) for x in inputs]
    kwargs = {name: torch.from_numpy(np.array(m, dtype=bool)) for name, m in
              (masks or {}).items()}
    if g.root.uses_tape:
        kwargs["tape"] = {g.slot_keys[uid]: to_torch(np.asarray(v), td)
                          for uid, v in tape.items() if uid in g.slot_keys}
    old = torch.get_default_dtype()  # a forward with no real input computes in torch's
    torch.set_default_dtype(td if td in (torch.float32, torch.float64) else old)  # default
    try:
        with torch.no_grad():
            out = module(*args, **kwargs)
    finally:
        torch.set_default_dtype(old)
    if not isinstance(out, tuple):
        out = (out,)
    flat = list(out)
    results = []
    for _arr, st, _ in g.root.outputs:
        v = flat.pop(0)
        live = flat.pop(0) if st is not None else None
        results.append((v, live))
    return results


def _live_np(live, shape) -> np.ndarray:
    if live is None:
        return np.ones(shape, dtype=bool)
    return np.broadcast_to(np.asarray(live, dtype=bool), shape)


def _numpy(v: torch.Tensor) -> np.ndarray:
    v = v.detach().cpu()
    if v.dtype in (torch.bfloat16, torch.float16):
        v = v.to(torch.float64)
    elif v.dtype == torch.complex32:
        v = v.to(torch.complex128)
    return v.numpy()


def compare(ref_outputs, got, quant: str, dtype: str, res: CheckResult, cod=None,
            tol: float | None = None) -> None:
    """Outputs and liveness must agree: exactly for naturals and, in emulate mode, for every
    output held in a quantised format; within the dtype's relative tolerance otherwise (a
    bare ``R`` output is never rounded, so emulate mode computes it like exact mode)."""
    tol = TOLERANCE.get(dtype, 1e-2) if tol is None else tol
    for j, (ref, (v, live)) in enumerate(zip(ref_outputs, got, strict=True)):
        held = cod is not None and storage_encoding(cod[j].datatype) is not None
        rv = np.asarray(ref.values)
        tv = _numpy(v)
        if tv.shape != rv.shape:
            try:
                ok = tv.ndim <= rv.ndim and np.broadcast_shapes(tv.shape, rv.shape) == rv.shape
            except ValueError:
                ok = False
            if not ok:
                res.ok = False
                res.problem = f"output {j}: shape {tv.shape}, interpreter {rv.shape}"
                return
            tv = np.broadcast_to(tv, rv.shape)
        rl = _live_np(ref.live, rv.shape)
        tl = _live_np(None if live is None else live.cpu().numpy(), rv.shape)
        if not np.array_equal(rl, tl):
            res.ok = False
            res.problem = (f"output {j}: liveness differs at {int((rl != tl).sum())} of "
                           f"{rl.size} positions")
            return
        a = np.where(rl, tv.astype(rv.dtype) if rv.dtype.kind != "c" else tv, 0)
        b = np.where(rl, rv, 0)
        if rv.dtype.kind in "iub":
            err = float(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64)))) if a.size \
                else 0.0
            scale = float(np.max(np.abs(b))) if b.size else 0.0
        else:
            with np.errstate(invalid="ignore"):
                diff = np.abs(a - b)
            nan_mismatch = np.isnan(a) != np.isnan(b)
            if nan_mismatch.any():
                res.ok = False
                res.problem = f"output {j}: NaN at different positions"
                return
            diff = np.where(np.isnan(diff), 0.0, diff)
            err = float(diff.max()) if diff.size else 0.0
            finite = np.abs(b[np.isfinite(b)])
            scale = float(finite.max()) if finite.size else 0.0
        rel = err / scale if scale > 0 else err
        res.max_abs = max(res.max_abs, err)
        res.max_rel = max(res.max_rel, rel)
        if quant == "emulate" and held:
            same = np.array_equal(a, b, equal_nan=True) if rv.dtype.kind != "i" else \
                np.array_equal(a, b)
            if not same and dtype == "float64":
                res.ok = False
                res.problem = (f"output {j}: emulate mode differs at "
                               f"{int((a != b).sum())} positions (max abs {err:.3g})")
        elif rv.dtype.kind in "iub":
            if err != 0:
                res.ok = False
                res.problem = f"output {j}: integers differ (max {err})"
        elif rel > tol:
            res.ok = False
            res.problem = f"output {j}: relative error {rel:.3g} > {tol:g}"


def _stored_params(morphism, env, params, weights, seed: int):
    """``(held, given)`` under the storage policy ``weights``. ``given`` maps every learned real
    array the policy names to its value in ``params``, or, where that is one value throughout
    (a zero bias, a unit gain: equal values hide how scale groups are cut), to seeded values
    around it over 20 binades (``0.5 * N(0, 1) * 2^-k``, ``k`` in 0..19: in mxfp8 a group's
    small values then fall to E4M3 subnormals, the one place its rounding depends on the
    group). ``held``: ``params`` with those values held in their formats as the interpreter
    holds them. The module is given ``given`` and encodes it itself."""
    specs = param_specs(morphism, env)
    given = copy.copy(params)  # its stand-in and computed lists kept
    rng = np.random.default_rng([seed, 0x5EED])
    for spec in specs:
        value = given.get(spec.key)
        if (value is None or not spec.learned or weights.format_for(spec.key) is None
                or kind(spec.datatype) != "real" or np.size(value) < 2):
            continue
        value = np.asarray(value)
        if np.all(value == value.flat[0]):
            spread = np.exp2(-rng.integers(0, 20, value.shape))
            given[spec.key] = value + 0.5 * rng.standard_normal(value.shape) * spread
    held, report = apply_policy(given, specs, weights)
    return held, {key: given[key] for key, _, _ in report}


def check_morphism(morphism, env: Env, *, name: str = "", quant: str = "exact",
                   dtype: str = "float64", seeds: int = 1, cache: ModuleCache | None = None,
                   key: str | None = None, reading: str = "faithful",
                   inputs: list | None = None, masks: list | None = None,
                   module_params=None, weights=None) -> CheckResult:
    """Run the interpreter and the generated module on the same random data, both under
    ``reading`` (:mod:`ir.readings`); ``inputs``: the arrays to feed instead of seeded random
    ones, e.g. recorded in context; ``masks``: per input, its liveness or None, given to the
    module as its ``<input>_live`` argument; ``module_params``: a function applied to the
    parameters loaded into the module only, for tests that a wrong weight is caught;
    ``weights``: a storage policy (:mod:`interpreter.storage_policy`) both sides apply, the
    interpreter to its parameters, the module by holding them in storage formats. ``seeds``
    >= 1 draws: a check that runs nothing proves nothing."""
    if seeds < 1:
        raise UsageError(f"seeds must be at least 1, not {seeds}")
    morphism = apply_reading(morphism, reading)

    path = getattr(morphism, "path", "")
    shapes = ", ".join(f"{a}" for a in morphism.dom) + " -> " + ", ".join(
        f"{a}" for a in morphism.cod)
    try:
        dims = " ".join("x".join(map(str, env.sizes(a.shape))) or "()" for a in morphism.dom)
        dims += " -> " + " ".join("x".join(map(str, env.sizes(a.shape))) or "()"
                                  for a in morphism.cod)
    except Exception:  # noqa: BLE001 - an unbound size shows up as the check's problem
        dims = "?"
    res = CheckResult(name or (morphism.title if isinstance(morphism, Block) else path), path,
                      shapes, dims=dims)
    cache = cache or ModuleCache()
    try:
        g, module = cache.get(morphism, env, quant, dtype, key, weights)
    except Exception as exc:  # noqa: BLE001 - reported, the check goes on
        res.ok = False
        res.problem = f"code generation failed: {type(exc).__name__}: {exc}"
        return res
    for seed in range(seeds):
        try:
            t0 = time.perf_counter()
            run = interpreter.interpret(morphism, env, quant=quant, stand_in=True, seed=seed)
            given = None
            if weights is not None:  # the values the stored weights denote
                params, given = _stored_params(morphism, env, run.params, weights, seed)
                run = interpreter.interpret(morphism, env, params=params, quant=quant,
                                            stand_in=True, seed=seed)
            xs = interpreter.random_inputs(morphism, env, seed) if inputs is None or seed \
                else list(inputs)
            tape = interpreter.random_tape(morphism, env, seed)
            if dtype != "float64":  # the oracle sees the numbers the module sees
                params = tol_.round_params(run.params, dtype)
                run = interpreter.interpret(morphism, env, params=params, quant=quant,
                                            stand_in=True, seed=seed)
                xs = [tol_.round_to(x, dtype) for x in xs]
                tape = {k: tol_.round_to(v, dtype) for k, v in tape.items()}
            lives = list(masks or [])
            lives += [None] * (len(xs) - len(lives))
            xs = [x if m is None else np.where(m, x, 0) for x, m in zip(xs, lives, strict=True)]
            fed = [x if m is None else (x, m) for x, m in zip(xs, lives, strict=True)]
            ev = run.evaluate(*fed, tape=tape)
            res.interp_s += time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001
            res.ok = False
            res.problem = f"interpreter failed: {type(exc).__name__}: {exc}"
            return res
        try:
            loaded = dict(run.params)
            if given is not None:  # the module encodes the policy's arrays itself
                loaded.update(given)
            g.load_params(module, loaded if module_params is None else module_params(loaded))
            t0 = time.perf_counter()
            names = mask_names(module, morphism.dom)
            given = {names[k]: m for k, m in enumerate(lives) if m is not None and k in names}
            got = run_generated(g, module, xs, tape, dtype, given)
            res.torch_s += time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001
            res.ok = False
            res.problem = f"generated module failed: {type(exc).__name__}: {exc}"
            return res
        tol = None
        if dtype != "float64":
            try:
                est = tol_.rounding_error(morphism, env, run.params, fed, tape, ev.outputs,
                                          dtype, quant, seed)
            except Exception as exc:  # noqa: BLE001
                res.ok = False
                res.problem = f"interpreter failed (error estimate): {type(exc).__name__}: {exc}"
                return res
            res.error_estimate = max(res.error_estimate, est)
            tol = tol_.tolerance(dtype, est, tol_.reduction_length(morphism, env))
            res.tolerance = max(res.tolerance, tol)
        compare(ev.outputs, got, quant, dtype, res, morphism.cod, tol)
        if not res.ok:
            return res
    return res


__all__ = [
    "TOLERANCE",
    "CheckResult",
    "ModuleCache",
    "check_morphism",
    "kind",
    "run_generated",
]
