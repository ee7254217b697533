"""The older pyncd generation's transformer attention core (transformer.json): scores
``s[h, q, x] = sum_k Q[q, h, k] K[x, h, k]``, softmax over ``x``, then the weighted lower
triangle ``T = tril(s)`` (keep ``x <= q``), ``Y = T / (sum_x T + 1e-8)``, and
``out[q, h, k] = sum_x Y[h, q, x] V[x, h, k]``."""
from __future__ import annotations

import numpy as np


def attention_core(Q, K, V):
    s = np.einsum("qhk,xhk->hqx", Q, K)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(-1, keepdims=True)
    nq, nx = p.shape[-2:]
    keep = np.arange(nx)[None, :] <= np.arange(nq)[:, None]
    T = np.where(keep, p, 0.0)
    Y = T / (T.sum(-1, keepdims=True) + 1e-8)
    return np.einsum("hqx,xhk->qhk", Y, V)
