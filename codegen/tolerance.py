"""How close a generated module running in a narrower dtype must come to the float64 interpreter.

The oracle is the interpreter in float64 on the *same* numbers the module sees: inputs and
parameters are first rounded to the dtype (:func:`round_to`), so the comparison measures the
module's arithmetic, not the rounding of its data. A block's tolerance is derived from the dtype
and the block, not fixed: the interpreter is run again in float64 with every input, parameter
and operator result multiplied by ``1 + u xi`` (``u`` the dtype's unit roundoff, ``xi``
uniform in [-1, 1]; Monte Carlo arithmetic, :func:`rounding_error`). Its relative output change
``r`` estimates the error rounding to the dtype causes in *this* block at *these* inputs: it grows
with the number of operations and with the block's conditioning (an exponential of large logits,
a normalisation near a zero sum).

``tolerance = SAFETY * max(u, r)``; float64 keeps the fixed ``1e-10`` of exact mode. A wrong
weight (a perturbation far above ``u``) lands far outside it.
"""
from __future__ import annotations

import numpy as np
import torch

UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "bfloat16": 2.0 ** -8,
                 "float16": 2.0 ** -11}
"""Half the distance from 1 to the next number of each dtype."""

FLOAT64_TOLERANCE = 1e-10
SAFETY = 8.0
SAMPLES = 2

_TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def round_to(a, dtype: str):
    """A float64 (complex128) array rounded to ``dtype`` and back (naturals unchanged)."""
    a = np.asarray(a)
    if dtype == "float64" or a.dtype.kind not in "fc":
        return a
    t = torch.from_numpy(np.array(a, copy=True, order="C"))
    if t.is_complex():
        parts = torch.view_as_real(t).to(_TORCH[dtype]).to(torch.float64)
        return torch.view_as_complex(parts.contiguous()).numpy()
    return t.to(_TORCH[dtype]).to(torch.float64).numpy()


def round_params(params: dict, dtype: str) -> dict:
    return {k: round_to(v, dtype) for k, v in params.items()}


def perturbed(a, u: float, rng: np.random.Generator):
    """``a (1 + u xi)`` with ``xi`` uniform in [-1, 1] (naturals unchanged)."""
    a = np.asarray(a)
    if a.dtype.kind not in "fc":
        return a
    return a * (1 + u * rng.uniform(-1, 1, size=a.shape))


def relative_change(ref_outputs, other_outputs) -> float:
    """Largest ``max |a - b| / max |a|`` over real outputs, at positions live in both."""
    worst = 0.0
    for a, b in zip(ref_outputs, other_outputs):
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
                   dtype: str, quant: str, seed: int, samples: int = SAMPLES) -> float:
    """Monte Carlo estimate of the relative error of running ``morphism`` in ``dtype`` (``inputs``
    as the interpreter takes them: arrays or ``(values, live)`` pairs): the
    interpreter in float64 with every input, parameter and operator result multiplied by
    ``1 + u xi`` (``xi`` uniform in [-1, 1]), the largest relative output change over
    ``samples`` runs."""
    from ncdc import interpreter

    u = UNIT_ROUNDOFF[dtype]
    worst = 0.0
    for k in range(samples):
        rng = np.random.default_rng(10_000 + 100 * seed + k)

        def jitter(a, rng=rng):
            return perturbed(a, u, rng)

        p2 = {key: jitter(v) for key, v in params.items()}
        run = interpreter.interpret(morphism, env, params=p2, quant=quant, stand_in=True,
                                    seed=seed)
        fed = [(jitter(x[0]), x[1]) if isinstance(x, tuple) else jitter(x) for x in inputs]
        ev = run.evaluate(*fed, tape=tape, perturb=jitter)
        worst = max(worst, relative_change(reference, ev.outputs))
    return worst


def tolerance(dtype: str, estimate: float) -> float:
    """``SAFETY * max(u, estimate)`` (float64: :data:`FLOAT64_TOLERANCE`)."""
    if dtype == "float64":
        return FLOAT64_TOLERANCE
    return SAFETY * max(UNIT_ROUNDOFF[dtype], estimate)


__all__ = ["UNIT_ROUNDOFF", "round_params", "round_to", "rounding_error",
           "tolerance"]
