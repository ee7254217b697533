"""Generated modules holding weights in storage formats (codegen/prelude/storage.py,
codegen/storage.py, ``ncdc compile/check --weights``): dequantization bit-exact against
ml_dtypes, encoding equal to the interpreter's (interpreter/storage_policy.py), stored dtypes
kept through ``.to(dtype)``, meta init with chunked initialisers, and agreement with the
interpreter under the same policy."""
from __future__ import annotations

import numpy as np
import pytest

from ncdc import codegen
from ncdc.cli import main
from ncdc.interpreter.storage_policy import StoragePolicy, decode, encode
from ncdc.ir.errors import SpecError
from ncdc.verify.check import check_morphism
from tests.lazy import lazy, ml_dtypes, torch

S = lazy("ncdc.codegen.prelude.storage")
"""The prelude module, imported (with torch) by the first test that uses it."""

E4M3_ALL = np.arange(256, dtype=np.uint8)


def _stored(shape, fmt, lead=0):
    return S.StoredWeight(shape, fmt, lead).to(torch.float64)


def _set(w, codes, scales):
    with torch.no_grad():
        w.codes.copy_(torch.from_numpy(codes).view(w.codes.dtype))
        w.scales.copy_(torch.from_numpy(scales).view(torch.float8_e8m0fnu))


def test_e4m3_every_code_at_every_scale_is_ml_dtypes_exactly():
    # 256 rows (one per scale code) x 256 values (every E4M3 code): 8 groups of 32 per row
    w = _stored((256, 256), "mxfp8")
    codes = np.tile(E4M3_ALL, (256, 1))
    scales = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 8, axis=1)
    _set(w, codes, scales)
    want = (codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
            * np.repeat(scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float64), 32, axis=1))
    got = w.dequantize()
    assert got.dtype == torch.float64
    np.testing.assert_array_equal(got.numpy(), want)  # NaN codes and the NaN scale included
    assert np.isnan(want).sum() > 0 and np.isfinite(want).sum() > 60000
    # float32: exact wherever the float64 value is a finite float32
    w32 = w.to(torch.float32).dequantize().numpy()
    with np.errstate(over="ignore"):
        fits = np.isfinite(want) & (want.astype(np.float32).astype(np.float64) == want)
    assert fits.sum() > 50000
    np.testing.assert_array_equal(w32[fits], want[fits].astype(np.float32))


def test_e2m1_every_code_pair_and_nibble_order():
    w = _stored((1, 512), "mxfp4")  # 256 bytes: every pair of nibbles, scale 2^-3 .. 2^12
    scales = np.arange(124, 140, dtype=np.uint8)[None]
    _set(w, E4M3_ALL[None], scales)
    nibbles = np.stack([E4M3_ALL & 0x0F, E4M3_ALL >> 4], axis=-1).reshape(1, 512)
    values = nibbles.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    want = values * np.repeat(scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float64), 32)
    np.testing.assert_array_equal(w.dequantize().numpy(), want)
    assert sorted(set(np.abs(values.ravel()))) == [0, 0.5, 1, 1.5, 2, 3, 4, 6]


CASES = [((70, 3), 0), ((5, 33, 7), 1), ((4, 6, 3, 5), 2), ((65,), 0), ((3, 45), 0),
         ((31, 2, 9), 1)]


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4", "bfloat16", "float32"])
@pytest.mark.parametrize("shape,lead", CASES)
def test_encoding_equals_the_interpreters(fmt, shape, lead):
    """Codes and scales byte for byte (partial last groups, odd runs, leads) and the decoded
    values, from float64 values spanning 16 binades."""
    rng = np.random.default_rng(hash((fmt, shape)) % 2**32)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-8, 8, shape))
    st = encode(x, fmt, lead)
    w = _stored(shape, fmt, lead)
    w.encode_(torch.from_numpy(x))
    if st.scales is not None:
        assert w.codes.shape == st.codes.shape and w.scales.shape == st.scales.shape
        assert w.codes.detach().view(torch.uint8).numpy().tobytes() == \
            st.codes.view(np.uint8).tobytes()
        assert w.scales.detach().view(torch.uint8).numpy().tobytes() == \
            st.scales.view(np.uint8).tobytes()
    np.testing.assert_array_equal(w.dequantize().numpy(), decode(st))


def test_e2m1_ties_round_to_even_like_ml_dtypes():
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    x = np.concatenate([mids, -mids, mids + 1e-6, mids - 1e-6, [6.0, -6.0, 0.0, -1e-9, 1.99]])
    x = np.pad(x, (0, 64 - x.size))[None]
    x[0, 31] = x[0, 63] = 6.0  # each group's amax fixes its scale at 1
    w = _stored((1, 64), "mxfp4")
    w.encode_(torch.from_numpy(x))
    want = x.astype(ml_dtypes.float4_e2m1fn).astype(np.float64)
    np.testing.assert_array_equal(w.dequantize().numpy(), want)


def _ties(dtype, top):
    """Every midpoint of consecutive non-negative finite values of ``dtype`` up to ``top``."""
    bits = np.arange(1 << (8 * np.dtype(dtype).itemsize), dtype=np.uint16 if
                     np.dtype(dtype).itemsize == 2 else np.uint8)
    with np.errstate(invalid="ignore"):  # the NaN codes
        v = np.unique(bits.view(dtype).astype(np.float64))
    v = v[np.isfinite(v) & (v >= 0) & (v <= top)]
    return (v[1:] + v[:-1]) / 2


@pytest.mark.parametrize("fmt,dtype,top", [("bfloat16", "bfloat16", 1e30),
                                           ("mxfp8", "float8_e4m3fn", 448.0),
                                           ("mxfp4", "float4_e2m1fn", 6.0)])
def test_float64_just_off_a_tie_rounds_once_like_ml_dtypes(fmt, dtype, top):
    """A float64 value a hair (2^-35 relative, under float32's half ulp) from a tie of the
    format is rounded to the nearer side, as ml_dtypes rounds float64 directly; rounding to
    float32 first would put it on the tie and round it to even."""
    dtype = getattr(ml_dtypes, dtype)
    if dtype is ml_dtypes.float4_e2m1fn:  # 4-bit: 16 codes, viewed from the low nibble
        t = np.unique(np.arange(16, dtype=np.uint8).view(dtype).astype(np.float64))
        t = t[t >= 0]
        t = (t[1:] + t[:-1]) / 2
    else:
        t = _ties(dtype, top)
    x = np.concatenate([t * (1 + 2.0 ** -35), t * (1 - 2.0 ** -35), -t * (1 + 2.0 ** -35), t])
    if fmt != "bfloat16":  # groups of 31 values and the top, so each group's scale is 1
        x = np.pad(x, (0, -x.size % 31)).reshape(-1, 31)
        x = np.concatenate([x, np.full((x.shape[0], 1), top)], axis=1).ravel()
    w = _stored((x.size,), fmt)
    w.encode_(torch.from_numpy(x))
    want = x.astype(dtype).astype(np.float64)
    assert (want != x.astype(np.float32).astype(dtype).astype(np.float64)).sum() > x.size // 8
    np.testing.assert_array_equal(w.dequantize().numpy(), want)
    np.testing.assert_array_equal(w.dequantize().numpy(), decode(encode(x, fmt)))


def test_stored_dtypes_follow_device_moves_not_dtype_casts():
    w = S.StoredLinear(64, 8, weight_format="mxfp4", bias_format="mxfp8")
    before = {k: v.clone() for k, v in w.state_dict().items()}
    for cast in (lambda m: m.to(torch.bfloat16), lambda m: m.half(), lambda m: m.double()):
        m = cast(w)
        assert m.weight.codes.dtype == torch.uint8
        assert m.weight.scales.dtype == torch.float8_e8m0fnu
        assert m.bias.codes.dtype == torch.float8_e4m3fn
        assert not m.weight.codes.requires_grad
    assert w.weight.dequantize().dtype == torch.float64
    for k, v in w.state_dict().items():
        assert v.dtype == before[k].dtype and torch.equal(v.view(torch.uint8),
                                                          before[k].view(torch.uint8))
    assert "weight.codes" in dict(w.named_parameters())  # non-trainable parameters
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    assert w.to(torch.bfloat16)(x).dtype == torch.bfloat16


def test_nn_init_and_meta_construction_fill_in_chunks(monkeypatch):
    with torch.device("meta"):
        w = S.StoredWeight((64, 8, 300), "mxfp8", lead=1)
    assert w.codes.is_meta
    w.to_empty(device="cpu")
    seen = []
    real = S.encode_runs
    monkeypatch.setattr(S, "INIT_CHUNK", 5000)
    monkeypatch.setattr(S, "encode_runs", lambda r, f: (seen.append(r.shape), real(r, f))[1])
    torch.manual_seed(0)
    torch.nn.init.normal_(w, std=0.5)
    assert sum(a * b for a, b in seen) == w.numel() and max(a * b for a, b in seen) <= 5000
    assert len(seen) > 10
    torch.nn.init.zeros_(w)
    assert not w.dequantize().any()
    torch.nn.init.ones_(w)
    assert (w.dequantize() == 1).all()


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4"])
def test_initial_values_have_the_float_paths_distribution(fmt):
    """Moments of the chunked init against float normal draws encoded by the interpreter."""
    std = 0.03
    shape = (256, 4096)
    torch.manual_seed(1)
    w = _stored(shape, fmt)
    torch.nn.init.normal_(w, std=std)
    got = w.dequantize().numpy().ravel()
    ref = decode(encode(np.random.default_rng(2).normal(0, std, shape), fmt)).ravel()
    n = got.size
    assert abs(got.mean()) < 5 * std / np.sqrt(n)
    assert abs(got.var() / ref.var() - 1) < 0.01
    def kurt(v):
        return ((v - v.mean()) ** 4).mean() / v.var() ** 2

    assert abs(kurt(got) - kurt(ref)) < 0.05
    assert abs(np.mean(got == 0) - np.mean(ref == 0)) < 0.003


def test_expert_slices_decode_only_their_rows():
    w = _stored((40, 6, 33), "mxfp4", lead=1)
    torch.nn.init.normal_(w, std=1.0)
    dense = w.dequantize()
    for dim in (0, 1, 2):
        for i in (0, 3):
            assert torch.equal(w.select(dim, i), dense.select(dim, i))


POLICIES = {"mxfp8": ["mxfp8"], "mxfp4": ["*/Routed Experts/*=mxfp4", "*=bfloat16"],
            "mixed": ["*.bias=float32", "*W^{Ob}*=mxfp4", "mxfp8"]}


@pytest.mark.slow
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("title", ["Mixture of Experts", "Sliding Window Attention",
                                   "Mixing Coefficients"])
def test_check_agrees_with_the_interpreter_under_a_policy(bundled, title, policy):
    env = bundled.bind("tiny").env
    weights = StoragePolicy.parse(POLICIES[policy])
    m = bundled.block(title)
    exact = check_morphism(m, env, weights=weights, seeds=2)
    assert exact.ok, exact.problem
    assert exact.max_rel <= 1e-12
    emulate = check_morphism(m, env, weights=weights, quant="emulate")
    assert emulate.ok and emulate.max_abs == 0.0, emulate.problem


def test_policy_is_what_makes_them_agree(bundled):
    """Without the policy on the interpreter side the stored module disagrees."""
    env = bundled.bind("tiny").env
    m = bundled.block("Shared Expert")
    weights = StoragePolicy.parse(["mxfp4"])
    g = codegen.generate(m, env, weights=weights)
    assert "StoredLinear(" in g.source and "float8_e8m0fnu" in g.source
    cache = type("C", (), {"get": lambda self, *a, **k: (g, codegen.instantiate(
        codegen.load_module(g.source), g.class_name, torch.float64))})()
    res = check_morphism(m, env, cache=cache)
    assert not res.ok


@pytest.mark.slow
def test_static_form_and_a_bfloat16_forward(bundled):
    env = bundled.bind("tiny").env
    m = bundled.block("Mixture of Experts")
    g = codegen.generate(m, env, weights=StoragePolicy.parse(["*/Routed Experts/*=mxfp4",
                                                               "mxfp8"]))
    assert "pairwise_matmul(hidden_rows, self.w_g, 1, k_e_pairs)" in g.source
    mod = codegen.load_module(g.source)
    x = torch.randn(5, 64, dtype=torch.float64)
    outs = []
    for static in (False, True):
        torch.manual_seed(0)
        module = codegen.instantiate(mod, g.class_name, torch.float64, static_shapes=static)
        with torch.no_grad():
            outs.append(module(x))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-12, atol=1e-14)
    with torch.no_grad():
        low = module.to(torch.bfloat16)(x.to(torch.bfloat16))
    assert low.dtype == torch.bfloat16
    stored = [mm for mm in module.modules() if type(mm).__name__ == "StoredWeight"]
    assert {str(s.codes.dtype) for s in stored} == {"torch.uint8", "torch.float8_e4m3fn"}


def test_a_policy_a_shared_class_cannot_follow_is_refused(bundled):
    env = bundled.bind("tiny").env
    layer = bundled.block("Sliding Window Layer")
    policy = StoragePolicy.parse(["*/Single-Pass mHC/Mixing Coefficients/*=mxfp8"])
    with pytest.raises(SpecError, match="same format"):
        codegen.generate(layer, env, weights=policy)


@pytest.mark.slow
def test_compile_cli_writes_a_stored_module(tmp_path, capsys):
    out = tmp_path / "experts.py"
    assert main(["compile", "--block", "Routed Experts", "--weights", "mxfp4",
                 "-o", str(out)]) == 0
    src = out.read_text()
    flat = "".join(src.split())  # statements wrap where the line is full
    assert ("self.w_d=StoredWeight((self.config.expert_width,self.config.experts,"
            "self.config.hidden_width),'mxfp4',lead=1)") in flat
    assert ("StoredLinear(self.config.hidden_width,self.config.experts*self.config.expert_width,"
            "bias=False,weight_format='mxfp4')") in flat
    assert "self.w_d.dequantize()" in src
    mod = codegen.load_module(src)
    with torch.device("meta"):
        model = mod.RoutedExperts()
    model.to_empty(device="cpu")
    model.reset_parameters()
    sd = model.state_dict()
    assert sd["w_d.codes"].dtype == torch.uint8 and sd["w_g.weight.scales"].dtype == \
        torch.float8_e8m0fnu
    assert sd["w_g.weight.codes"].shape == (8 * 32, 32)  # [out, in/2]: e*f rows of m/2 bytes
    assert torch.isfinite(model.w_d.dequantize()).all()


@pytest.mark.slow
def test_stored_module_exports_compiles_and_saves(bundled, tmp_path):
    from safetensors.torch import load_file, save_file

    env = bundled.bind("tiny").env
    g = codegen.generate(bundled.block("Shared Expert"), env,
                         weights=StoragePolicy.parse(["mxfp4"]))
    mod = codegen.load_module(g.source)
    model = getattr(mod, g.class_name)()
    x = torch.randn(3, 64)
    want = model(x)
    assert torch.equal(torch.export.export(model, (x,)).module()(x), want)
    assert torch.equal(torch.compile(model, backend="eager", fullgraph=True)(x), want)
    save_file(model.state_dict(), tmp_path / "w.safetensors")
    back = load_file(tmp_path / "w.safetensors")
    assert back["w_gs.weight.codes"].dtype == torch.uint8
    assert back["w_gs.weight.scales"].dtype == torch.float8_e8m0fnu
    fresh = getattr(mod, g.class_name)()
    fresh.load_state_dict(back)
    assert torch.equal(fresh(x), want)


def test_check_cli_with_weights(capsys):
    assert main(["check", "--block", "Shared Expert", "--weights", "mxfp4", "--quant",
                 "emulate", "--json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["results"][0]["max_abs"] == 0.0


def test_generated_lists_its_stored_members(bundled):
    env = bundled.bind("tiny").env
    g = codegen.generate(bundled.block("Expert Gate"), env,
                         weights=StoragePolicy.parse(["*.weight=bfloat16"]))
    assert g.stored and set(g.stored.values()) == {"bfloat16"}
    assert set(g.stored) <= set(g.param_keys)


def test_table_lookups_decode_only_their_rows(bundled):
    w = _stored((50, 3, 40), "mxfp4")
    torch.nn.init.normal_(w)
    idx = torch.tensor([[3, 49], [0, 3]])
    assert torch.equal(w[idx], w.dequantize()[idx])
    env = bundled.bind("tiny").env
    g = codegen.generate(bundled.block("Embedding"), env, weights=StoragePolicy.parse(["mxfp4"]))
    assert "self.e_table[tokens]" in g.source
    res = check_morphism(bundled.block("Embedding"), env, weights=StoragePolicy.parse(["mxfp4"]))
    assert res.ok and res.max_rel == 0.0, res.problem
