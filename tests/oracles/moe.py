"""Mixture of Experts ("Expert Gate", "Routed Experts", "Shared Expert", "Mixture of Experts").

Gate: router scores divided by the temperature, score function sqrt(softplus); a learned bias
is added to a copy; the k experts are chosen from that copy; a chosen slot carries 1 where the
biased score is above zero; the unbiased score times that number; the k gates divided by their
sum plus a small epsilon and scaled by the route scale 3/2.
Experts: gate projection limited from above at lambda then SiLU; up projection clamped to
[-lambda, lambda]; product; down projection."""
from __future__ import annotations

import numpy as np

from .common import silu


def expert_gate(u, WR, bias, k, tau, eps_r, route_scale=1.5):
    """u[m] -> (gates[e] (0 off the chosen), chosen[e] bool)."""
    s = np.sqrt(np.log(np.exp((u @ WR) / tau) + 1.0))
    biased = s + bias
    order = np.argsort(-biased, kind="stable")[:k]
    chosen = np.zeros(s.shape, dtype=bool)
    chosen[order] = True
    g = np.where(chosen, (biased > 0) * s, 0.0)
    g = g / (g.sum() + eps_r)
    return route_scale * g, chosen


def swiglu(x, WG, WU, WD, lam):
    G = silu(np.minimum(x @ WG, lam))
    U = np.clip(x @ WU, -lam, lam)
    return (G * U) @ WD


def routed_experts(u, WG, WU, WD, lam):
    """u[m], WG/WU[m, e, f], WD[f, e, m] -> Y[e, m] for every expert."""
    return np.stack([swiglu(u, WG[:, e, :], WU[:, e, :], WD[:, e, :], lam)
                     for e in range(WG.shape[1])])


def mixture_of_experts(u, P, k, tau, eps_r, lam):
    g, _ = expert_gate(u, P["WR"], P["bias"], k, tau, eps_r)
    Y = routed_experts(u, P["WG"], P["WU"], P["WD"], lam)
    return g @ Y + swiglu(u, P["WGs"], P["WUs"], P["WDs"], lam)
