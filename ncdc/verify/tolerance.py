"""How close a generated module running in a narrower dtype must come to the float64 interpreter.

The oracle is the interpreter in float64 on the *same* numbers the module sees: inputs and
parameters are first rounded to the dtype (:func:`round_to`), so the comparison measures the
module's arithmetic, not the rounding of its data. A block's tolerance is derived from the dtype
and the block, not fixed, from an error model with two terms:

* ``r``, the rounding at operator boundaries: the interpreter is run again in float64 with every
  operator result rounded to the dtype (:func:`rounding_error`), and ``r`` is its largest
  relative output change. It follows the block's conditioning (an exponential of large logits,
  a normalisation near a zero sum) and its depth;
* ``sqrt(L) u_acc``, the accumulation inside one operator, which that run does not see: torch
  sums, contracts and normalises 16-bit and float32 values in float32 (``u_acc = 2^-24``), and
  the error of a sum of ``L`` terms grows like ``sqrt(L) u_acc`` (``L``: the block's longest
  reduction, :func:`reduction_length`).

``tolerance = SAFETY * (max(u, r) + sqrt(L) u_acc)`` (``u``: the dtype's unit roundoff, the
error of rounding the output alone); float64 keeps the fixed ``1e-10`` of exact mode. On the
bundled spec at ``tiny`` the module's error stays below 0.6 of the tolerance in every dtype; a
weight perturbed so that the output moves by more than it (a few ``u``: about 2% in bfloat16) is
reported (``tests/test_dtypes_check.py``).
"""
from __future__ import annotations

import numpy as np

from ncdc import interpreter
from ncdc.ir.lazy import lazy_module
from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.walk import walk

torch = lazy_module("torch")

UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "bfloat16": 2.0 ** -8,
                 "float16": 2.0 ** -11}
"""Half the distance from 1 to the next number of each dtype."""

FLOAT64_TOLERANCE = 1e-10
SAFETY = 4.0
ACCUMULATION_ROUNDOFF = 2.0 ** -24
"""torch accumulates sums and products of float32, bfloat16 and float16 values in float32."""


def round_to(a, dtype: str):
    """A float64 (complex128) array rounded to ``dtype`` and back (naturals unchanged)."""
    a = np.asarray(a)
    if dtype == "float64" or a.dtype.kind not in "fc":
        return a
    t = torch.from_numpy(np.array(a, copy=True, order="C"))
    if t.is_complex():
        parts = torch.view_as_real(t).to(getattr(torch, dtype)).to(torch.float64)
        return torch.view_as_complex(parts.contiguous()).numpy()
    return t.to(getattr(torch, dtype)).to(torch.float64).numpy()


def round_params(params: dict, dtype: str) -> dict:
    return {k: round_to(v, dtype) for k, v in params.items()}


def relative_change(ref_outputs, other_outputs) -> float:
    """Largest ``max |a - b| / max |a|`` over real outputs, at positions live in both."""
    worst = 0.0
    for a, b in zip(ref_outputs, other_outputs, strict=True):
        va, vb = np.asarray(a.values), np.asarray(b.values)
        if va.dtype.kind not in "fc":
            continue
        live = np.ones(va.shape, dtype=bool)
        for m in (a.live, b.live):
            if m is not None:
                live &= np.broadcast_to(np.asarray(m, dtype=bool), va.shape)
        fin = live & np.isfinite(va) & np.isfinite(vb)
        if not fin.any():
            continue
        scale = float(np.max(np.abs(va[fin])))
        diff = float(np.max(np.abs(va[fin] - vb[fin])))
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def rounding_error(morphism, env, params: dict, inputs: list, tape: dict, reference,
                   dtype: str, quant: str, seed: int) -> float:
    """The relative output change when the interpreter (float64, ``inputs`` as it takes them:
    arrays or ``(values, live)`` pairs, already in the dtype like ``params``) rounds every
    operator result to ``dtype``: the rounding error at operator boundaries."""
    run = interpreter.interpret(morphism, env, params=params, quant=quant, stand_in=True,
                                seed=seed)
    ev = run.evaluate(*inputs, tape=tape, perturb=lambda a: round_to(a, dtype))
    return relative_change(reference, ev.outputs)


def reduction_length(morphism, env) -> int:
    """The most terms one operator of ``morphism`` sums (contractions, folds, norms): the
    largest product of an input's target sizes."""
    longest = 1
    for site in walk(morphism):
        b = site.node
        if not isinstance(b, Broadcasted):
            continue
        for w in b.input_weaves:
            try:
                sizes = [int(x) for x in env.sizes(w.target)]
            except Exception:  # noqa: BLE001 - a size left symbolic: not a reduction we see
                sizes = [1]
            longest = max(longest, int(np.prod(sizes, dtype=np.int64)))
    return longest


def tolerance(dtype: str, estimate: float, length: int = 1) -> float:
    """``SAFETY * (max(u, estimate) + sqrt(length) u_acc)`` (float64:
    :data:`FLOAT64_TOLERANCE`)."""
    if dtype == "float64":
        return FLOAT64_TOLERANCE
    return SAFETY * (max(UNIT_ROUNDOFF[dtype], estimate)
                     + np.sqrt(length) * ACCUMULATION_ROUNDOFF)


__all__ = ["UNIT_ROUNDOFF", "reduction_length", "round_params", "round_to", "rounding_error",
           "tolerance"]
