"""``prefill`` and ``step`` against the interpreter's whole-sequence outputs.

The interpreter evaluates a block on a whole sequence of ``T`` tokens once. The generated module
then decodes the same sequence in calls: ``prefill`` on the first ``k`` tokens, then ``step`` on
chunks of the given sizes (1 for one token at a time), the same parameters and tape (sliced along
the token axis). Every output position of every call is compared with the interpreter's output
at that position, with :func:`ncdc.verify.check.compare`: within ``1e-12`` relative in float64
(exact), bit for bit in emulate mode, liveness exactly.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ncdc import interpreter
from ncdc.codegen.boundary import mask_names
from ncdc.codegen.decoder import token_input
from ncdc.codegen.generate import DTYPES, generate, instantiate, load_module
from ncdc.ir.axes import is_token_axis
from ncdc.ir.env import Env
from ncdc.ir.errors import UsageError
from ncdc.ir.incremental import Analysis, analyse
from ncdc.ir.lazy import lazy_module
from ncdc.ir.morphisms import Morphism

from .check import CheckResult, compare, to_torch

torch = lazy_module("torch")

TOLERANCE = 1e-12
"""Relative tolerance of a decoded position against the whole sequence, float64 exact."""


@dataclass
class DecodeResult(CheckResult):
    tokens: int = 0
    prefill: int = 0
    chunks: tuple[int, ...] = ()
    state_entries: dict = field(default_factory=dict)
    analysis: Analysis | None = None
    incremental: bool = True


class _Ref:
    def __init__(self, values, live):
        self.values, self.live = values, live


def _token_dim(arr) -> int | None:
    shape = tuple(arr.shape)
    for i, a in enumerate(shape):
        if is_token_axis(a):
            return i - len(shape)
    return None


def _slice(x, dim: int | None, lo: int, hi: int):
    if dim is None:
        return x
    index = [slice(None)] * np.ndim(x)
    index[dim] = slice(lo, hi)
    return np.asarray(x)[tuple(index)]


def plan_chunks(total: int, prefill: int, chunks) -> list[int]:
    """Call sizes after a prefill of ``prefill`` tokens: ``chunks`` cycled until ``total``."""
    chunks = [int(c) for c in chunks] or [1]
    if prefill < 1 or prefill > total or any(c < 1 for c in chunks):
        raise UsageError(f"prefill {prefill} and chunks {chunks} must be positive, prefill at "
                         f"most the {total} tokens")
    sizes, done, i = [prefill], prefill, 0
    while done < total:
        c = min(chunks[i % len(chunks)], total - done)
        sizes.append(c)
        done += c
        i += 1
    return sizes


@dataclass
class Prepared:
    """A block, its whole-sequence interpreter outputs and its generated module, ready to be
    decoded with any schedule (:func:`decode_and_compare`)."""

    morphism: Morphism
    quant: str
    analysis: Analysis
    g: object = None
    module: object = None
    xs: list = field(default_factory=list)
    lives: list = field(default_factory=list)
    tape: dict = field(default_factory=dict)
    outputs: list = field(default_factory=list)
    interp_s: float = 0.0


def prepare(morphism: Morphism, env: Env, *, quant: str = "exact", seed: int = 0,
            masks: list | None = None, module_params=None) -> Prepared:
    """Analyse ``morphism`` (a :class:`~ir.errors.NonCausalError` if it reads later tokens);
    when it is incremental, evaluate it on a whole seeded sequence and build its module with the
    interpreter's parameters. ``masks``: per input its liveness or None (given to both sides);
    ``module_params``: applied to the module's parameters only (tests that a wrong weight is
    caught)."""
    analysis = analyse(morphism)
    analysis.raise_if_not_causal()
    prep = Prepared(morphism, quant, analysis)
    if token_input(morphism) is None or not analysis.incremental:
        return prep
    t0 = time.perf_counter()
    run = interpreter.interpret(morphism, env, quant=quant, stand_in=True, seed=seed)
    xs = interpreter.random_inputs(morphism, env, seed)
    prep.tape = interpreter.random_tape(morphism, env, seed)
    lives = list(masks or []) + [None] * (len(xs) - len(masks or []))
    prep.xs = [x if m is None else np.where(m, x, 0) for x, m in zip(xs, lives, strict=True)]
    prep.lives = lives
    ev = run.evaluate(*[x if m is None else (x, m) for x, m in zip(prep.xs, lives, strict=True)],
                      tape=prep.tape)
    prep.outputs = list(ev.outputs)
    prep.interp_s = time.perf_counter() - t0
    prep.g = generate(morphism, env, quant=quant, runtime={"loader", "decoding"})
    mod = load_module(prep.g.source)
    kwargs = {"quant": quant} if prep.g.root.needs_quant else {}
    prep.module = instantiate(mod, prep.g.class_name, DTYPES["float64"], **kwargs)
    prep.g.load_params(prep.module, run.params if module_params is None
                       else module_params(dict(run.params)))
    return prep


def check_incremental(morphism: Morphism, env: Env, *, name: str = "", quant: str = "exact",
                      prefill: int = 1, chunks=(1,), seed: int = 0, masks: list | None = None,
                      module_params=None) -> DecodeResult:
    """Decode ``morphism`` in calls (``prefill`` tokens, then ``chunks`` cycled) and compare
    every position with the interpreter's whole-sequence output (:func:`prepare`,
    :func:`decode_and_compare`)."""
    prep = prepare(morphism, env, quant=quant, seed=seed, masks=masks,
                   module_params=module_params)
    return decode_and_compare(prep, prefill, chunks, name=name)


def decode_and_compare(prep: Prepared, prefill: int, chunks, *, name: str = "",
                       edit_state=None) -> DecodeResult:
    """Decode the prepared sequence: ``prefill`` tokens, then ``chunks`` cycled; compare every
    position. ``edit_state(state)``, applied between calls, lets a test damage the state."""
    morphism, analysis = prep.morphism, prep.analysis
    path = getattr(morphism, "path", "")
    res = DecodeResult(name or path, path, "", tolerance=TOLERANCE, analysis=analysis)
    if token_input(morphism) is None:
        res.problem = "no token axis in its inputs: nothing to decode"
        return res
    if not analysis.incremental:
        res.ok, res.incremental = False, False
        res.problem = "not incremental: " + "; ".join(
            r.describe() for r in analysis.of_kind("unbounded"))
        return res

    g, module, xs, lives, tape = prep.g, prep.module, prep.xs, prep.lives, prep.tape
    res.interp_s = prep.interp_s
    tin = token_input(morphism)
    total = np.shape(xs[tin[0]])[tin[1]]
    sizes = plan_chunks(total, prefill, chunks)
    res.tokens, res.prefill, res.chunks = total, sizes[0], tuple(sizes[1:])
    in_dims = [_token_dim(a) for a in morphism.dom]
    slot_dims = {slot.uid: _token_dim(arr) for slot, arr in interpreter.tape_needs(morphism)}
    names = mask_names(module, morphism.dom)
    outs: list[list] = [[] for _ in g.root.outputs]
    state: dict | None = None
    lo = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for n in sizes:
            hi = lo + n
            args = [to_torch(_slice(x, d, lo, hi), torch.float64) for x, d in zip(xs, in_dims, strict=True)]
            kw = {names[k]: torch.from_numpy(np.array(_slice(m, in_dims[k], lo, hi), dtype=bool))
                  for k, m in enumerate(lives) if m is not None and k in names}
            if g.root.uses_tape:
                kw["tape"] = {g.slot_keys[uid]: to_torch(_slice(v, slot_dims.get(uid), lo, hi),
                                                          torch.float64)
                              for uid, v in tape.items() if uid in g.slot_keys}
            if not hasattr(module, "prefill"):  # position by position: forward decodes
                got, state = module(*args, **kw), {}
            elif state is None:
                got, state = module.prefill(*args, **kw)
            else:
                if edit_state is not None:
                    state = edit_state(dict(state))
                got, state = module.step(*args, state=state, **kw)
            flat = list(got) if isinstance(got, tuple) else [got]
            for j, (_arr, st, _) in enumerate(g.root.outputs):
                v = flat.pop(0)
                live = flat.pop(0) if st is not None else None
                outs[j].append((v, live))
            lo = hi
    res.torch_s = time.perf_counter() - t0
    res.state_entries = {k: tuple(v.shape) for k, v in (state or {}).items()}
    decoded, refs = [], []
    for j, arr in enumerate(morphism.cod):
        d = _token_dim(arr)
        if d is None:
            continue  # no token axis: each call's output stands alone
        values = torch.cat([v for v, _ in outs[j]], d)
        live = None
        if all(lv is not None for _, lv in outs[j]):
            live = torch.cat([torch.broadcast_to(lv, v.shape) for v, lv in outs[j]], d)
        decoded.append((values, live))
        refs.append(_Ref(prep.outputs[j].values, prep.outputs[j].live))
    compare(refs, decoded, prep.quant, "float64", res,
            tuple(a for a in morphism.cod if _token_dim(a) is not None), TOLERANCE)
    return res


__all__ = ["TOLERANCE", "DecodeResult", "Prepared", "check_incremental", "decode_and_compare",
           "plan_chunks", "prepare"]
