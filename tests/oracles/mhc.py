"""mHC (manifold-constrained hyper-connections) — "Mixing Coefficients" and "Single-Pass mHC".

Mixing Coefficients (description): the four streams are normalised together; three linear
maps read them: the collapse vector ``sigmoid + eps_hc``, the output vector ``2 sigmoid``, the
combine matrix, made nearly doubly stochastic by twenty Sinkhorn rounds (the first: exp,
divide each row by its sum, add eps_hc, divide each column by its sum plus eps_hc; the nineteen
after it: rows then columns divided by their sums plus eps_hc)."""
from __future__ import annotations

import numpy as np

from .common import rms_normalise, sigmoid


def sinkhorn(C, eps_hc, rounds=20):
    """C[..., i, j]: rows are i (sum over j), columns are j (sum over i)."""
    C = np.exp(C)
    C = C / C.sum(-1, keepdims=True)
    C = C + eps_hc
    C = C / (C.sum(-2, keepdims=True) + eps_hc)
    for _ in range(rounds - 1):
        C = C / (C.sum(-1, keepdims=True) + eps_hc)
        C = C / (C.sum(-2, keepdims=True) + eps_hc)
    return C


def mixing_coefficients(X, H0, b0, H1, b1, H2, b2, eps, eps_hc, rounds=20):
    """X[..., n, m] -> (pre[..., n], post[..., n], comb[..., n, n])."""
    Xn = rms_normalise(X, eps, axes=(-2, -1))
    pre = sigmoid(np.einsum("...nm,nmk->...k", Xn, H0) + b0) + eps_hc
    post = 2.0 * sigmoid(np.einsum("...nm,nmk->...k", Xn, H1) + b1)
    comb = sinkhorn(np.einsum("...nm,nmij->...ij", Xn, H2) + b2, eps_hc, rounds)
    return pre, post, comb


def single_pass_mhc(a, X, coef_params, gamma, body, eps, eps_rms, eps_hc):
    """docs/format.md §14.2: collapse ``u = sum_n a X``, RMSNorm with gain, the body, then
    ``X' = post y + sum_n' comb[n', n] X[n']``; returns (pre, X')."""
    pre, post, comb = mixing_coefficients(X, *coef_params, eps, eps_hc)
    u = np.einsum("xn,xnm->xm", a, X)
    y = body(rms_normalise(u, eps_rms) * gamma)
    Xp = post[:, :, None] * y[:, None, :] + np.einsum("xpn,xpm->xnm", comb, X)
    return pre, Xp
