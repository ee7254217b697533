"""The interpreter against hand-written numpy oracles (tests/oracles), float64, <= 1e-10
relative, on the same inputs and parameters. Sizes: the tiny preset."""
from __future__ import annotations

import numpy as np
import pytest

from ncdc import interpreter
from tests.oracles import attention, engram, legacy, mhc, moe
from tests.oracles.common import assert_close, bf16, e4m3, random_params

FP8_PATH = ("data.content[2].body.content[0].body.content[3].content[1].content[2].content[0]"
            ".content[0].content[0].content[3].operator.block.body.content[2].content[2]"
            ".content[3].operator.block")


@pytest.fixture(scope="module")
def tiny(bundled):
    return bundled.bind("tiny")


def const(env, label):
    hits = [v for s, v in env.values.items() if s.label == label]
    assert len(hits) == 1, label
    return float(hits[0])


def size(env, label):
    hits = {int(v) for s, v in env.values.items() if s.label == label}
    assert len(hits) == 1, label
    return hits.pop()


def prepared(block, env, seed=1, quant="exact"):
    """(run, params): the block interpreted with random non-trivial parameters."""
    base = interpreter.init_params(block, env, stand_in=True)
    params = random_params(interpreter.interpret(block, env, stand_in=True).param_specs, env,
                           seed, base)
    return interpreter.interpret(block, env, params=params, quant=quant), params


def rng(seed=0):
    return np.random.default_rng(seed)


def test_mixing_coefficients_with_20_sinkhorn_rounds(bundled, tiny):
    env = tiny.env
    blk = bundled.block("Mixing Coefficients")
    run, P = prepared(blk, env)
    X = bf16(rng().standard_normal(run.dom_shapes()[0]) * 3)
    pre, post, comb = run(X)
    k = "Mixing Coefficients/"
    want = mhc.mixing_coefficients(
        X, P[k + "H_{0}.weight"], P[k + "H_{0}.bias"], P[k + "H_{1}.weight"],
        P[k + "H_{1}.bias"], P[k + "H_{2}.weight"], P[k + "H_{2}.bias"],
        const(env, r"\varepsilon"), const(env, r"\varepsilon_{hc}"), rounds=20)
    for got, exp, what in zip((pre, post, comb), want, ("pre", "post", "comb"), strict=True):
        assert_close(got, exp, what=what)
    # 20 rounds leave the combine matrix nearly doubly stochastic; 19 would differ
    assert np.allclose(comb.sum(0), 1, atol=1e-4) and np.allclose(comb.sum(1), 1, atol=1e-4)
    nineteen = mhc.sinkhorn(np.einsum("nm,nmij->ij", X / np.sqrt(np.mean(X * X) + 1e-20),
                                      P[k + "H_{2}.weight"]) + P[k + "H_{2}.bias"], 1e-6, 19)
    assert not np.allclose(comb, nineteen, rtol=1e-12, atol=0)


def test_attention_core_window_and_sink(bundled, tiny):
    env = tiny.env
    blk = bundled.block("Attention Core")
    run = interpreter.interpret(blk, env)
    assert run.param_specs == []
    x, c = run.dom_shapes()[1]
    w = run.dom_shapes()[2][1]
    r = rng(2)
    k = r.standard_normal((x, c))
    K, live = attention.window(k, w)
    q = r.standard_normal((x, c))
    sink = np.float64(0.7)
    (got,) = run(sink, q, (K, np.broadcast_to(live[..., None], K.shape)))
    assert_close(got, attention.attention_core(sink, q, K, live))
    # the first token attends to itself and the sink only
    s0 = q[0] @ k[0] / np.sqrt(c)
    assert_close(got[0], np.exp(s0) * k[0] / (np.exp(sink) + np.exp(s0)))


def test_sliding_window_attention_block(bundled, tiny):
    env = tiny.env
    blk = bundled.block("Sliding Window Attention")
    run, P = prepared(blk, env, seed=3)
    u = bf16(rng(3).standard_normal(run.dom_shapes()[0]))
    (got,) = run(u)
    k = "Sliding Window Attention/"
    names = {"sink": "sink.weight", "WQa": "W^{Qa}.weight", "gq": "RMSNorm.gain",
             "WQb": "W^{Qb}.weight", "WKV": "W^{KV}.weight", "gkv": "RMSNorm~1.gain",
             "WOa": "Grouped Output Projection/W^{Oa}.weight",
             "WOb": "Grouped Output Projection/W^{Ob}.weight"}
    params = {n: P[k + key] for n, key in names.items()}
    want = attention.sliding_window_attention(
        u, params, size(env, "h"), size(env, "g"), size(env, "w"), size(env, "t"),
        const(env, r"\epsilon"), const(env, r"\beta_{0}"))
    assert_close(got, want)


def test_fused_bank_linear_matches_literal_evaluation(bundled, tiny):
    blk = bundled.block("Sliding Window Attention")
    env = tiny.env
    run, P = prepared(blk, env, seed=4)
    literal = interpreter.interpret(blk, env, params=P, fuse=False)
    u = rng(4).standard_normal(run.dom_shapes()[0])
    assert_close(run(u)[0], literal(u)[0], rtol=1e-13)


def test_expert_gate(bundled, tiny):
    env = tiny.env
    blk = bundled.block("Expert Gate")
    run, P = prepared(blk, env, seed=5)
    for seed in range(4):
        u = rng(seed).standard_normal(run.dom_shapes()[0])
        res = run.evaluate(u)
        (g,) = res.outputs
        want, chosen = moe.expert_gate(u, P["Expert Gate/W^{R}.weight"],
                                       P["Expert Gate/bias.weight"], size(env, "k"),
                                       const(env, r"\tau"), const(env, r"\varepsilon_{r}"))
        assert g.live is not None and np.array_equal(g.live, chosen)
        assert_close(g.values, want)


def test_routed_and_shared_experts(bundled, tiny):
    env = tiny.env
    lam = const(env, r"\lambda")
    run, P = prepared(bundled.block("Routed Experts"), env, seed=6)
    u = 3 * rng(6).standard_normal(run.dom_shapes()[0])
    (Y,) = run(u)
    k = "Routed Experts/"
    assert_close(Y, moe.routed_experts(u, P[k + "W^{G}.weight"], P[k + "W^{U}.weight"],
                                       P[k + "W^{D}.weight"], lam))
    run, P = prepared(bundled.block("Shared Expert"), env, seed=7)
    (y,) = run(u)
    k = "Shared Expert/"
    assert_close(y, moe.swiglu(u, P[k + "W^{Gs}.weight"], P[k + "W^{Us}.weight"],
                               P[k + "W^{Ds}.weight"], lam))


def test_mixture_of_experts(bundled, tiny):
    env = tiny.env
    run, P = prepared(bundled.block("Mixture of Experts"), env, seed=8)
    k = "Mixture of Experts/"
    names = {"WR": "Expert Gate/W^{R}.weight", "bias": "Expert Gate/bias.weight",
             "WG": "Routed Experts/W^{G}.weight", "WU": "Routed Experts/W^{U}.weight",
             "WD": "Routed Experts/W^{D}.weight", "WGs": "Shared Expert/W^{Gs}.weight",
             "WUs": "Shared Expert/W^{Us}.weight", "WDs": "Shared Expert/W^{Ds}.weight"}
    params = {n: P[k + key] for n, key in names.items()}
    u = rng(8).standard_normal(run.dom_shapes()[0])
    want = moe.mixture_of_experts(u, params, size(env, "k"), const(env, r"\tau"),
                                  const(env, r"\varepsilon_{r}"), const(env, r"\lambda"))
    assert_close(run(u)[0], want)


def test_fp8_round_trip_exact_and_emulated(bundled, tiny):
    env = tiny.env
    blk = bundled.block(FP8_PATH)
    assert blk.title == "FP8 Round Trip of a Window Latent"
    exact = interpreter.interpret(blk, env)
    emul = interpreter.interpret(blk, env, quant="emulate")
    (c,) = exact.dom_shapes()[0]
    r = rng(9)
    for scale in (1e-3, 1.0, 300.0):
        v = bf16(r.standard_normal(c) * scale * np.exp(r.uniform(-3, 3, c)))
        assert_close(exact(v)[0], v, rtol=1e-15, what="exact mode returns its input")
        g = v.reshape(-1, 32)
        a = np.abs(g).max(-1, keepdims=True)
        s = 2.0 ** np.ceil(np.log2(np.maximum(a, 1e-4) / 448.0))
        want = bf16(e4m3(np.clip(g / s, -448, 448)) * s).ravel()
        np.testing.assert_array_equal(emul(v)[0], want)
        # the explicit round trip is the MX recipe the evaluator uses for MXFP8 casts
        np.testing.assert_array_equal(emul(v)[0], interpreter.quant.mx_block_round(v))


def test_ngram_hash(bundled, tiny):
    env = tiny.env
    blk = bundled.block("N-gram Hash")
    run = interpreter.interpret(blk, env, stand_in=True)
    P = run.params
    primes = P["N-gram Hash/p_{1}/p_{1}.value"]
    alpha = P["N-gram Hash/\\alpha_{1}/\\alpha_{1}.value"]
    assert np.all(alpha % 2 == 1)
    x, L = run.dom_shapes()[0]
    c = rng(10).integers(0, size(env, r"\hat{v}"), x)
    C, live = engram.lookback(c, L)
    (rows,) = run((C, live))
    want = engram.ngram_hash(C, live, alpha, primes, size(env, "G"), size(env, "K"))
    np.testing.assert_array_equal(rows, want)
    assert rows.max() < size(env, "T_{1}")


def test_engram_gate(bundled, tiny):
    env = tiny.env
    run, P = prepared(bundled.block("Engram Gate"), env, seed=11)
    r = rng(11)
    X = r.standard_normal(run.dom_shapes()[0])
    key = r.standard_normal(run.dom_shapes()[1]) * 2
    (g,) = run(X, key)
    want = engram.engram_gate(X, key, P["Engram Gate/w_{1}.weight"], const(env, r"\varepsilon"),
                              const(env, r"\varepsilon_{g}"))
    assert_close(g, want)


def test_engram_of_layer_1_reads_ids_from_the_tape(bundled, tiny):
    env = tiny.env
    blk = bundled.block("Engram of Layer 1")
    run, P = prepared(blk, env, seed=12)
    assert [s.label for s, _ in run.tape_needs] == ["ids"]
    r = rng(12)
    X = r.standard_normal(run.dom_shapes()[0])
    ids = r.integers(0, size(env, "v"), X.shape[0])
    (got,) = run(X, tape={"ids": ids})
    k = "Engram of Layer 1/"
    names = {"Ecmp": "Token Map/Token Map/E_{cmp}.table", "alpha": "N-gram Hash/\\alpha_{1}/"
             "\\alpha_{1}.value", "primes": "N-gram Hash/p_{1}/p_{1}.value",
             "Eng": "N-gram Table/N-gram Table/E_{ng_{1}}.table",
             "WK": "N-gram Table/W^{K}_{1}.weight", "WV": "N-gram Table/W^{V}_{1}.weight",
             "w": "Engram Gate/w_{1}.weight"}
    params = {n: P[k + key] for n, key in names.items()}
    want = engram.engram(X, ids, params, size(env, "G"), size(env, "K"), size(env, "L"),
                         const(env, r"\varepsilon"), const(env, r"\varepsilon_{g}"))
    assert_close(got, want)


@pytest.mark.slow
def test_sliding_window_layer(bundled, tiny):
    """Layer 0 = mHC(attention) then mHC(MoE), docs/format.md §14.2, against the oracles above."""
    env = tiny.env
    blk = bundled.block("Sliding Window Layer")
    run, P = prepared(blk, env, seed=13)
    r = rng(13)
    xs, n = run.dom_shapes()[0]
    a = np.zeros((xs, n))
    a[:, 0] = 1.0
    a_live = np.zeros((xs, n), dtype=bool)
    a_live[:, 0] = True
    X = r.standard_normal(run.dom_shapes()[1])
    pre, Xp = run((a, a_live), X)
    eps, eps_rms, eps_hc = (const(env, r"\varepsilon"), const(env, r"\epsilon"),
                            const(env, r"\varepsilon_{hc}"))

    def coef(prefix):
        k = prefix + "Mixing Coefficients/"
        return [P[k + s] for s in ("H_{0}.weight", "H_{0}.bias", "H_{1}.weight",
                                   "H_{1}.bias", "H_{2}.weight", "H_{2}.bias")]

    k0 = "Sliding Window Layer/Single-Pass mHC/"
    k1 = "Sliding Window Layer/Single-Pass mHC~1/"
    swa = {n_: P[k0 + "Sliding Window Attention/" + key] for n_, key in {
        "sink": "sink.weight", "WQa": "W^{Qa}.weight", "gq": "RMSNorm.gain",
        "WQb": "W^{Qb}.weight", "WKV": "W^{KV}.weight", "gkv": "RMSNorm~1.gain",
        "WOa": "Grouped Output Projection/W^{Oa}.weight",
        "WOb": "Grouped Output Projection/W^{Ob}.weight"}.items()}
    moe_p = {n_: P[k1 + "Mixture of Experts/" + key] for n_, key in {
        "WR": "Expert Gate/W^{R}.weight", "bias": "Expert Gate/bias.weight",
        "WG": "Routed Experts/W^{G}.weight", "WU": "Routed Experts/W^{U}.weight",
        "WD": "Routed Experts/W^{D}.weight", "WGs": "Shared Expert/W^{Gs}.weight",
        "WUs": "Shared Expert/W^{Us}.weight", "WDs": "Shared Expert/W^{Ds}.weight"}.items()}

    def attn(u):
        return attention.sliding_window_attention(
            u, swa, size(env, "h"), size(env, "g"), size(env, "w"), size(env, "t"), eps_rms,
            const(env, r"\beta_{0}"))

    def experts(u):
        return np.stack([moe.mixture_of_experts(row, moe_p, size(env, "k"), const(env, r"\tau"),
                                                const(env, r"\varepsilon_{r}"),
                                                const(env, r"\lambda")) for row in u])

    a1, X1 = mhc.single_pass_mhc(a, X, coef(k0), P[k0 + "RMSNorm.gain"], attn, eps, eps_rms,
                                 eps_hc)
    a2, X2 = mhc.single_pass_mhc(a1, X1, coef(k1), P[k1 + "RMSNorm.gain"], experts, eps,
                                 eps_rms, eps_hc)
    assert_close(pre, a2, what="collapse vector")
    assert_close(Xp, X2, what="residual")


def test_transformer_attention_core_older_generation(transformer):
    b = transformer.bind("tiny")
    blk = transformer.block("Attention Core")
    run = interpreter.interpret(blk, b.env)
    r = rng(14)
    Q, K, V = (r.standard_normal(s) for s in run.dom_shapes())
    (got,) = run(Q, K, V)
    assert_close(got, legacy.attention_core(Q, K, V))
