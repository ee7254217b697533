"""Layer 0 of DeepSeek-V4.1-Flash (the "Sliding Window Layer": an mHC attention sublayer and
an mHC mixture-of-experts sublayer), written by hand in PyTorch from the block descriptions
(docs/format.md §14.2), independently of ncdc's code generator. Exact arithmetic (every storage-format
cast is the identity), any leading batch dims. Used by ``bench/codegen.py`` as the speed
reference and checked against the generated module on the same weights.

``sparse_experts=True`` runs each routed expert only on the tokens routed to it (the usual MoE
dispatch); the default evaluates every expert densely, as the spec's arrays are laid out.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

EPS_NORM = 1e-20  # \varepsilon and \epsilon: added under every RMS root
EPS_HC = 1e-6  # \varepsilon_hc
EPS_ROUTER = 1e-20  # \varepsilon_r
TAU = 1.0  # router temperature
LIMIT = 10.0  # SwiGLU clamp \lambda
ROPE_BASE = 10000.0  # \beta_0


def rms_norm(x, dims, gain=None, eps=EPS_NORM):
    y = x / torch.sqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps)
    return y if gain is None else y * gain


class MixingCoefficients(nn.Module):
    """pre = sigma(H0 Xn) + eps_hc, post = 2 sigma(H1 Xn), comb = Sinkhorn(H2 Xn), per token,
    with Xn the four streams RMS-normalised together."""

    def __init__(self, n, m):
        super().__init__()
        self.h0 = nn.Parameter(torch.zeros(n, m, n))
        self.b0 = nn.Parameter(torch.zeros(n))
        self.h1 = nn.Parameter(torch.zeros(n, m, n))
        self.b1 = nn.Parameter(torch.zeros(n))
        self.h2 = nn.Parameter(torch.zeros(n, m, n, n))
        self.b2 = nn.Parameter(torch.zeros(n, n))

    def forward(self, streams):  # [..., x, n, m]
        xn = rms_norm(streams, (-2, -1))
        flat = xn.flatten(-2)
        pre = torch.sigmoid(flat @ self.h0.flatten(0, 1) + self.b0) + EPS_HC
        post = 2 * torch.sigmoid(flat @ self.h1.flatten(0, 1) + self.b1)
        comb = (flat @ self.h2.flatten(0, 1).flatten(1) + self.b2.flatten()).unflatten(
            -1, self.b2.shape)
        comb = torch.exp(comb)
        comb = comb / comb.sum(dim=-1, keepdim=True)  # rows: a softmax
        comb = comb + EPS_HC
        comb = comb / (comb.sum(dim=-2, keepdim=True) + EPS_HC)  # columns
        for _ in range(19):
            comb = comb / (comb.sum(dim=-1, keepdim=True) + EPS_HC)
            comb = comb / (comb.sum(dim=-2, keepdim=True) + EPS_HC)
        return pre, post, comb


def rotate(v, table):
    """RoPE on the last 2t channels: pairs (2i, 2i+1) as complex numbers times the table."""
    t2 = 2 * table.shape[-1]
    keep, rot = v[..., :-t2], v[..., -t2:]
    z = torch.complex(rot[..., 0::2], rot[..., 1::2]) * table
    return torch.cat([keep, torch.stack((z.real, z.imag), dim=-1).flatten(-2)], dim=-1)


class SlidingWindowAttention(nn.Module):
    def __init__(self, m, q, h, c, t, w, g, o):
        super().__init__()
        self.h, self.c, self.t, self.w, self.g = h, c, t, w, g
        self.sink = nn.Parameter(torch.zeros(h))
        self.w_qa = nn.Parameter(torch.zeros(m, q))
        self.q_gain = nn.Parameter(torch.ones(q))
        self.w_qb = nn.Parameter(torch.zeros(q, h, c))
        self.w_kv = nn.Parameter(torch.zeros(m, c))
        self.kv_gain = nn.Parameter(torch.ones(c))
        self.w_oa = nn.Parameter(torch.zeros(h // g, c, g, o))
        self.w_ob = nn.Parameter(torch.zeros(g, o, m))
        theta = ROPE_BASE ** (-torch.arange(t, dtype=torch.float64) / t)
        self.register_buffer("theta", theta.to(torch.get_default_dtype()), persistent=False)

    def forward(self, u):  # [..., x, m]
        tokens = u.shape[-2]
        angle = torch.arange(tokens, dtype=self.theta.dtype)[:, None] * self.theta
        table = torch.polar(torch.ones_like(angle), angle)  # [x, t]
        cq = rms_norm(u @ self.w_qa, -1, self.q_gain)
        query = torch.einsum("...xq,qhc->...hxc", cq, self.w_qb)
        query = rotate(query, table)
        latent = rotate(rms_norm(u @ self.w_kv, -1, self.kv_gain), table)  # [..., x, c]
        # window: keys[x, j] = latent[x - j] for j < w, dead before the first token
        padded = F.pad(latent, (0, 0, self.w - 1, 0))
        keys = padded.unfold(-2, self.w, 1).flip(-1).transpose(-1, -2)  # [..., x, w, c]
        j = torch.arange(self.w)
        live = torch.arange(tokens)[:, None] >= j[None, :]  # [x, w]
        scores = torch.einsum("...hxc,...xwc->...hxw", query, keys) / math.sqrt(self.c)
        e = torch.where(live, torch.exp(scores), 0)
        den = torch.exp(self.sink)[:, None] + e.sum(dim=-1)  # [..., h, x]
        out = torch.einsum("...hxw,...xwc->...hxc", e, keys) / den[..., None]
        out = rotate(out, table.conj())
        heads = out.transpose(-3, -2).unflatten(-2, (self.g, self.h // self.g))  # [x, g, j, c]
        grouped = torch.einsum("...gjc,jcgo->...go", heads, self.w_oa)
        return torch.einsum("...go,gom->...m", grouped, self.w_ob)


class MixtureOfExperts(nn.Module):
    def __init__(self, m, e, k, f, sparse_experts=False):
        super().__init__()
        self.k, self.sparse = k, sparse_experts
        self.w_r = nn.Parameter(torch.zeros(m, e))
        self.bias = nn.Parameter(torch.zeros(e))
        self.w_g = nn.Parameter(torch.zeros(m, e, f))
        self.w_u = nn.Parameter(torch.zeros(m, e, f))
        self.w_d = nn.Parameter(torch.zeros(f, e, m))
        self.w_gs = nn.Parameter(torch.zeros(m, f))
        self.w_us = nn.Parameter(torch.zeros(m, f))
        self.w_ds = nn.Parameter(torch.zeros(f, m))

    @staticmethod
    def swiglu(gate, up):
        return F.silu(gate - torch.relu(gate - LIMIT)) * up.clamp(-LIMIT, LIMIT)

    def gate(self, u):
        s = torch.sqrt(F.softplus((u @ self.w_r) / TAU))  # [..., e]
        biased = s + self.bias
        kept = torch.topk(biased, self.k, dim=-1).indices
        chosen = torch.zeros_like(biased, dtype=torch.bool).scatter(-1, kept, True)
        g = torch.where(chosen & (biased > 0), s, 0)
        return 1.5 * g / (g.sum(dim=-1, keepdim=True) + EPS_ROUTER), chosen

    def forward(self, u):  # [..., x, m]
        g, chosen = self.gate(u)
        shared = self.swiglu(u @ self.w_gs, u @ self.w_us) @ self.w_ds
        if not self.sparse:
            hidden = self.swiglu(torch.einsum("...m,mef->...ef", u, self.w_g),
                                 torch.einsum("...m,mef->...ef", u, self.w_u))
            routed = torch.einsum("...ef,fem,...e->...m", hidden, self.w_d, g)
            return routed + shared
        flat, gates, sel = u.reshape(-1, u.shape[-1]), g.reshape(-1, g.shape[-1]), \
            chosen.reshape(-1, g.shape[-1])
        routed = torch.zeros_like(flat)
        for e in range(gates.shape[-1]):
            rows = sel[:, e].nonzero().squeeze(-1)
            if rows.numel():
                x = flat[rows]
                y = self.swiglu(x @ self.w_g[:, e], x @ self.w_u[:, e]) @ self.w_d[:, e]
                routed.index_add_(0, rows, y * gates[rows, e, None])
        return routed.reshape(u.shape) + shared


class SinglePassMHC(nn.Module):
    def __init__(self, n, m, body):
        super().__init__()
        self.coefficients = MixingCoefficients(n, m)
        self.gain = nn.Parameter(torch.ones(m))
        self.body = body

    def forward(self, collapse, streams):  # [..., x, n], [..., x, n, m]
        pre, post, comb = self.coefficients(streams)
        u = rms_norm(torch.einsum("...n,...nm->...m", collapse, streams), -1, self.gain)
        y = self.body(u)
        mixed = post[..., None] * y[..., None, :] + torch.einsum("...pm,...pn->...nm", streams,
                                                                 comb)
        return pre, mixed


class Layer0(nn.Module):
    def __init__(self, *, n, m, q, h, c, t, w, g, o, e, k, f, sparse_experts=False):
        super().__init__()
        self.attention = SinglePassMHC(n, m, SlidingWindowAttention(m, q, h, c, t, w, g, o))
        self.experts = SinglePassMHC(n, m, MixtureOfExperts(m, e, k, f, sparse_experts))

    def forward(self, collapse, streams):
        collapse, streams = self.attention(collapse, streams)
        return self.experts(collapse, streams)

    @classmethod
    def from_env(cls, env, symbols, **kw):
        """Sizes from an ncdc binding (``symbols``: label -> FreeNumeric)."""
        sizes = {k: env.size(symbols[k]) for k in "nmqhctwgoekf"}
        return cls(**sizes, **kw)

    def load_interpreter_params(self, params, root="Sliding Window Layer"):
        """Copy the interpreter's arrays (keys of ``ir.params.param_specs``) in."""
        a, x = f"{root}/Single-Pass mHC", f"{root}/Single-Pass mHC~1"
        table = {}
        for prefix, mhc in ((a, self.attention), (x, self.experts)):
            mc = f"{prefix}/Mixing Coefficients"
            table.update({
                mhc.coefficients.h0: f"{mc}/H_{{0}}.weight", mhc.coefficients.b0:
                f"{mc}/H_{{0}}.bias", mhc.coefficients.h1: f"{mc}/H_{{1}}.weight",
                mhc.coefficients.b1: f"{mc}/H_{{1}}.bias", mhc.coefficients.h2:
                f"{mc}/H_{{2}}.weight", mhc.coefficients.b2: f"{mc}/H_{{2}}.bias",
                mhc.gain: f"{prefix}/RMSNorm.gain"})
        s, sw = f"{a}/Sliding Window Attention", self.attention.body
        table.update({sw.sink: f"{s}/sink.weight", sw.w_qa: f"{s}/W^{{Qa}}.weight",
                      sw.q_gain: f"{s}/RMSNorm.gain", sw.w_qb: f"{s}/W^{{Qb}}.weight",
                      sw.w_kv: f"{s}/W^{{KV}}.weight", sw.kv_gain: f"{s}/RMSNorm~1.gain",
                      sw.w_oa: f"{s}/Grouped Output Projection/W^{{Oa}}.weight",
                      sw.w_ob: f"{s}/Grouped Output Projection/W^{{Ob}}.weight"})
        e, moe = f"{x}/Mixture of Experts", self.experts.body
        table.update({moe.w_r: f"{e}/Expert Gate/W^{{R}}.weight",
                      moe.bias: f"{e}/Expert Gate/bias.weight",
                      moe.w_g: f"{e}/Routed Experts/W^{{G}}.weight",
                      moe.w_u: f"{e}/Routed Experts/W^{{U}}.weight",
                      moe.w_d: f"{e}/Routed Experts/W^{{D}}.weight",
                      moe.w_gs: f"{e}/Shared Expert/W^{{Gs}}.weight",
                      moe.w_us: f"{e}/Shared Expert/W^{{Us}}.weight",
                      moe.w_ds: f"{e}/Shared Expert/W^{{Ds}}.weight"})
        with torch.no_grad():
            for p, key in table.items():
                p.copy_(torch.as_tensor(params[key]).to(p.dtype))
        return self
