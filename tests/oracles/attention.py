"""Sliding Window Attention (descriptions of "Sliding Window Attention", "Attention Core",
"Rotary Embedding", "Grouped Output Projection", "FP8 Round Trip of a Window Latent").

The attention core of one head: scores of the query against the latent at every window slot,
times ``|c|^-1/2``, exponentiated; the denominator is the exponentiated sink logit plus the sum
of the exponentials; the exponentials contracted against the latents, divided by the
denominator. Slots before token 0 hold nothing."""
from __future__ import annotations

import numpy as np

from .common import rms_normalise


def attention_core(sink, q, K, live):
    """sink scalar, q[x, c], K[x, w, c], live[x, w] -> o[x, c]."""
    c = q.shape[-1]
    s = np.einsum("xc,xwc->xw", q, K) / np.sqrt(c)
    e = np.where(live, np.exp(s), 0.0)
    den = np.exp(sink) + e.sum(-1)
    return np.einsum("xw,xwc->xc", e, K) / den[:, None]


def window(k, w):
    """K[x, j, c] = k[x - j, c] for j < w, live iff x - j >= 0."""
    x = k.shape[0]
    idx = np.arange(x)[:, None] - np.arange(w)[None, :]
    live = idx >= 0
    K = np.where(live[..., None], k[np.clip(idx, 0, None)], 0.0)
    return K, live


def rope(v, n_rot, base, inverse=False):
    """Rotate the last ``n_rot`` channels of v[x, c] in pairs (first of a pair = real part) by
    ``exp(i x base^(-t / (n_rot/2)))``; ``inverse`` turns the other way."""
    x, c = v.shape
    t = np.arange(n_rot // 2)
    theta = base ** (-t / (n_rot // 2))
    F = np.exp(1j * np.arange(x)[:, None] * theta[None, :])
    if inverse:
        F = np.conj(F)
    z = v[:, c - n_rot:]
    p = (z[:, 0::2] + 1j * z[:, 1::2]) * F
    out = v.copy()
    out[:, c - n_rot::2] = p.real
    out[:, c - n_rot + 1::2] = p.imag
    return out


def fp8_round_trip_exact(v, group=32):
    """The FP8 round trip in exact mode: s = 2^ceil(log2(max(a, 1e-4)/448)) per group, then
    clamp(v/s) * s (no rounding): returns v up to the clamp (which never bites)."""
    g = v.reshape(-1, group)
    a = np.abs(g).max(-1, keepdims=True)
    s = 2.0 ** np.ceil(np.log2(np.maximum(a, 1e-4) / 448.0))
    return (np.clip(g / s, -448, 448) * s).reshape(v.shape)


def sliding_window_attention(u, P, n_heads, g, w, t, eps, base):
    """u[x, m] -> out[x, m] in exact mode. ``P`` holds sink[h], WQa[m,q], gq[q], WQb[q,h,c],
    WKV[m,c], gkv[c], WOa[j,c,g,o], WOb[g,o,m]."""
    cq = rms_normalise(u @ P["WQa"], eps) * P["gq"]
    q = np.einsum("xq,qhc->hxc", cq, P["WQb"])
    n_rot = 2 * t
    q = np.stack([rope(q[h], n_rot, base) for h in range(n_heads)])
    k = rms_normalise(u @ P["WKV"], eps) * P["gkv"]
    k = rope(k, n_rot, base)
    k = np.stack([fp8_round_trip_exact(row) for row in k])
    K, live = window(k, w)
    o = np.stack([attention_core(P["sink"][h], q[h], K, live) for h in range(n_heads)])
    o = np.stack([rope(o[h], n_rot, base, inverse=True) for h in range(n_heads)])
    o = o.transpose(1, 0, 2)                        # [x, h, c]
    x, h, c = o.shape
    og = o.reshape(x, g, h // g, c)                 # heads in groups: h = g_index * j + j_index
    r = np.einsum("xgjc,jcgo->xgo", og, P["WOa"])
    return np.einsum("xgo,gom->xm", r, P["WOb"])
