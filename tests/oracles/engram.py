"""Engram of layer 1 ("Token Map", "N-gram Hash", "N-gram Table", "Engram Gate", "Engram of
Layer 1" descriptions and formulas).

hash[x, G] = XOR over the live look-back slots i_L <= i_G + 1 of alpha[i_L] c[x - i_L];
row[x, G, K] = hash mod p[G, K] + offset[G, K], the offset of a pair being the sum of the primes
before it. Gate: the channel sum of stream x weight x key, divided by rms(stream), rms(key)
(epsilon under the roots) and sqrt(|m|); g = sigmoid(sign(y) sqrt(max(|y|, eps_g)));
X' = X + g v."""
from __future__ import annotations

import numpy as np

from .common import rms_normalise, sigmoid


def lookback(c, L):
    """C[x, j] = c[x - j], live iff x - j >= 0."""
    x = c.shape[0]
    idx = np.arange(x)[:, None] - np.arange(L)[None, :]
    live = idx >= 0
    return np.where(live, c[np.clip(idx, 0, None)], 0), live


def ngram_hash(C, live, alpha, primes, G, K):
    """C[x, L] naturals with liveness -> rows[x, G, K]."""
    x, L = C.shape
    P = C.astype(np.int64) * alpha.astype(np.int64)
    H = np.zeros((x, G), dtype=np.int64)
    for g in range(G):
        for j in range(min(g + 2, L)):
            H[:, g] ^= np.where(live[:, j], P[:, j], 0)
    p = primes.astype(np.int64)
    off = (np.cumsum(p) - p).reshape(G, K)
    return H[:, :, None] % p.reshape(G, K)[None] + off[None]


def engram_gate(X, key, w, eps, eps_g):
    """X, key[x, n, m], w[n, m] -> g[x, n]."""
    m = X.shape[-1]
    y = np.sum(rms_normalise(X, eps) * w * rms_normalise(key, eps), axis=-1) / np.sqrt(m)
    return sigmoid(np.sign(y) * np.sqrt(np.maximum(np.abs(y), eps_g)))


def engram(X, ids, P, G, K, L, eps, eps_g):
    """X[x, n, m], ids[x] -> X'[x, n, m] in exact mode."""
    c = P["Ecmp"][ids]
    C, live = lookback(c, L)
    rows = ngram_hash(C, live, P["alpha"], P["primes"], G, K)
    emb = P["Eng"][rows]                                   # [x, G, K, D]
    key = np.einsum("xgkd,gkdnm->xnm", emb, P["WK"])
    val = np.einsum("xgkd,gkdm->xm", emb, P["WV"])
    g = engram_gate(X, key, P["w"], eps, eps_g)
    return X + g[:, :, None] * val[:, None, :]
