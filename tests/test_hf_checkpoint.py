"""Checkpoints of the real implementation: a tiny DeepSeek-V4 built and saved by Hugging Face
transformers itself (``DeepseekV4ForCausalLM``, float64), loaded through the built-in maps and
compared sub-block by sub-block with HF's own modules on the same inputs.

Where the V4.1 diagram and HF agree the outputs agree to float64 rounding (1e-13). The three
places the diagram reads differently are each shown by a test that patches HF's side as the
diagram reads it, gets agreement, and checks that HF unpatched disagrees:

- Single-Pass mHC scheduling: the diagram collapses a sublayer's streams with the collapse
  vector the *previous* sublayer predicted and hands its own prediction on; HF collapses with
  the vector each sublayer predicts itself (patch: collapse with ``prev_pre``, keep ``pre``);
- no per-head q norm: HF applies ``q_b_norm`` after ``q_b_proj``; the diagram's Sliding Window
  Attention has no Normalize there (patch: ``q_b_norm`` is the identity);
- expert gate sign: the diagram gives a chosen expert a gate of zero where its biased score is
  <= 0, before the gates are normalised; HF does not (patch: zero those before normalising).

HF computes its norms, rotary tables and hyper-connection in float32 inside a float64 model
(about 1e-7 off). Every comparison runs HF's modeling file re-executed with those float32
islands turned float64 (its source with ``.float()`` -> ``.double()`` and ``torch.float32`` ->
``torch.float64``; :func:`hf_module`); :func:`test_hf_float32_islands_are_what_separates_1e-7`
measures what the unpatched file gives. Patches are textual edits of HF's source, each
asserted to apply, so a change of HF's code fails here rather than passing silently.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import sys
import types

import numpy as np
import pytest

from ncdc.api import interpret
from ncdc.checkpoint.interp import interpreter_params
from ncdc.ir.params import param_specs
from tests.lazy import Deferred, ml_dtypes, torch, transformers

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed")
hf_v4 = Deferred(lambda: importlib.import_module(
    "transformers.models.deepseek_v4.modeling_deepseek_v4"))
"""HF's DeepSeek-V4 modelling module, imported by the first test that uses it."""

TOKENS = 12                                   # the tiny preset's x = a * b
SIZES = {"w": 4}                              # HF's sliding_window
CONSTANTS = {r"\varepsilon": 1e-6, r"\epsilon": 1e-6}   # HF's rms_norm_eps
TIGHT = 1e-13
MHC, MHC1 = "Sliding Window Layer / Single-Pass mHC", "Sliding Window Layer / Single-Pass mHC~1"

FLOAT64 = [(".float()", ".double()"), ("torch.float32", "torch.float64"),
           ("dtype=torch.float)", "dtype=torch.float64)")]
SCHEDULING = [("        collapsed = (pre.unsqueeze(-1) * hidden_streams)",
               "        self.own_pre = pre\n"
               "        collapsed = (self.prev_pre.unsqueeze(-1) * hidden_streams)")]
GATE_SIGN = [("indices = torch.topk(scores + self.e_score_correction_bias, self.top_k, dim=-1, "
              "sorted=False).indices\n        weights = scores.gather(1, indices)",
              "indices = torch.topk(scores + self.e_score_correction_bias, self.top_k, dim=-1, "
              "sorted=False).indices\n        weights = scores.gather(1, indices) * "
              "((scores + self.e_score_correction_bias).gather(1, indices) > 0)")]
KEEP_PRE = [("        collapsed = (pre.unsqueeze(-1) * hidden_streams)",
             "        self.own_pre = pre\n"
             "        collapsed = (pre.unsqueeze(-1) * hidden_streams)")]


def hf_module(*patches):
    """HF's modeling_deepseek_v4 executed anew from its source with ``patches`` (pairs of
    old, new text; each must occur) applied."""
    v4 = hf_v4.resolve()
    src = inspect.getsource(v4)
    for old, new in [p for group in patches for p in group]:
        assert old in src, f"HF's modeling_deepseek_v4 no longer contains {old!r}"
        src = src.replace(old, new)
    name = f"{v4.__name__}_ncdc_{abs(hash(src))}"
    mod = types.ModuleType(name)
    mod.__package__, mod.__file__ = v4.__package__, v4.__file__
    sys.modules[name] = mod
    exec(compile(src, v4.__file__, "exec", dont_inherit=True), mod.__dict__)
    return mod


def tiny_config():
    return transformers.DeepseekV4Config(
        vocab_size=100, hidden_size=64, hc_mult=4, num_attention_heads=4, head_dim=64,
        q_lora_rank=32, o_groups=2, o_lora_rank=32, sliding_window=4, n_routed_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=32, num_hidden_layers=1,
        layer_types=["sliding_attention"], mlp_layer_types=["moe"], partial_rotary_factor=0.25)


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """(one-file checkpoint directory, sharded one, the torch state dict), all saved by
    transformers from one seeded tiny model."""
    torch.manual_seed(0)
    model = transformers.DeepseekV4ForCausalLM(tiny_config()).to(torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
        model.model.layers[0].mlp.gate.e_score_correction_bias.normal_(0, 0.3)
    one, many = tmp_path_factory.mktemp("hf1"), tmp_path_factory.mktemp("hf3")
    model.save_pretrained(one)
    model.save_pretrained(many, max_shard_size="40KB")
    return one, many, {k: v.clone() for k, v in model.state_dict().items()}


def load_hf(path, module, q_norm=True):
    model = module.DeepseekV4ForCausalLM.from_pretrained(
        path, dtype=torch.float64, experts_implementation="eager").eval()
    if not q_norm:
        model.model.layers[0].self_attn.q_b_norm = torch.nn.Identity()
    return model


@pytest.fixture(scope="module")
def ncdc_side(bundled):
    binding = bundled.bind("tiny", SIZES, CONSTANTS)
    return bundled, binding.env, param_specs(bundled.model(), binding.env)


def ncdc_run(ncdc_side, block_name, path, map_name="deepseek-v4-hf"):
    spec, env, model_specs = ncdc_side
    block = spec.block(block_name)
    params, _ = interpreter_params(block, env, path, map_name, model_specs=model_specs)
    return interpret(block, env, params=params), params


def layer_kwargs(model):
    """The keyword arguments HF's model hands its layer 0 (rotary tables, mask) for
    :data:`TOKENS` tokens."""
    got = {}
    layer = model.model.layers[0]
    for hc in (layer.attn_hc, layer.ffn_hc):
        hc.prev_pre = torch.ones(1, TOKENS, 4, dtype=torch.float64)
    h = layer.register_forward_pre_hook(lambda m, a, kw: got.update(kw), with_kwargs=True)
    with torch.no_grad():
        model.model(inputs_embeds=torch.zeros(1, TOKENS, 64, dtype=torch.float64))
    h.remove()
    return {k: got[k] for k in ("position_embeddings", "position_ids", "attention_mask")}


def run_layer(model, streams, c0=None):
    """HF's layer 0 on ``streams`` [x, n, m]; with the scheduling patch the attention
    sublayer collapses with ``c0`` and the MoE sublayer with the attention's prediction.
    Returns (output streams, the MoE sublayer's predicted collapse vector or None, the inputs
    and outputs of self_attn and mlp)."""
    layer, io = model.model.layers[0], {}
    kwargs = layer_kwargs(model)
    hooks = [getattr(layer, n).register_forward_hook(
        lambda m, a, o, n=n: io.__setitem__(n, (a[0][0].numpy(), o[0][0].numpy()
                                                if n == "self_attn" else o[0].numpy())))
             for n in ("self_attn", "mlp")]
    if c0 is not None:
        layer.attn_hc.prev_pre = torch.from_numpy(c0[None])
        hooks.append(layer.ffn_hc.register_forward_pre_hook(
            lambda m, a: setattr(m, "prev_pre", layer.attn_hc.own_pre)))
    with torch.no_grad():
        out = layer(torch.from_numpy(streams[None]), **kwargs)
    for h in hooks:
        h.remove()
    pre = getattr(layer.ffn_hc, "own_pre", None)
    return out[0].numpy(), None if pre is None else pre[0].numpy(), io


def inputs(seed=1):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.2, 1.0, size=(TOKENS, 4)), rng.normal(size=(TOKENS, 4, 64))


def worst(a, b) -> float:
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


# ------------------------------------------------------------------ where the two agree


def test_mixing_coefficients_agree_to_float64_rounding(hf_dirs, ncdc_side):
    one, _, _ = hf_dirs
    model = load_hf(one, hf_module(FLOAT64, KEEP_PRE))
    _, streams = inputs()
    for name, hc in ((MHC, model.model.layers[0].attn_hc), (MHC1, model.model.layers[0].ffn_hc)):
        run, _ = ncdc_run(ncdc_side, name + " / Mixing Coefficients", one)
        with torch.no_grad():
            post, comb, _ = hc(torch.from_numpy(streams[None]))
        for t in range(3):
            pre_n, post_n, comb_n = run(streams[t])
            assert worst(pre_n, hc.own_pre[0, t]) < TIGHT
            assert worst(post_n, post[0, t]) < TIGHT
            assert worst(comb_n, comb[0, t]) < TIGHT


def test_moe_agrees_to_float64_rounding(hf_dirs, ncdc_side):
    one, _, _ = hf_dirs
    model = load_hf(one, hf_module(FLOAT64, SCHEDULING), q_norm=False)
    c0, streams = inputs()
    _, _, io = run_layer(model, streams, c0)
    x, y = io["mlp"]
    run, _ = ncdc_run(ncdc_side, "Mixture of Experts", one)
    gate = model.model.layers[0].mlp.gate
    biased = torch.sqrt(torch.nn.functional.softplus(torch.from_numpy(x) @ gate.weight.T)) \
        + gate.e_score_correction_bias
    chosen = biased.topk(2, dim=-1).values
    assert bool((chosen > 0).all())          # the gate-sign difference does not arise here
    got = np.stack([run(x[t])[0] for t in range(TOKENS)])
    assert worst(got, y) < TIGHT


# ------------------------------------------------------------------ the three differences


def test_attention_agrees_once_hf_drops_its_per_head_q_norm(hf_dirs, ncdc_side):
    one, _, _ = hf_dirs
    run, _ = ncdc_run(ncdc_side, "Sliding Window Attention", one)
    c0, streams = inputs()
    results = {}
    for q_norm in (False, True):
        model = load_hf(one, hf_module(FLOAT64, SCHEDULING), q_norm=q_norm)
        _, _, io = run_layer(model, streams, c0)
        x, y = io["self_attn"]
        results[q_norm] = worst(run(x)[0], y)
    assert results[False] < TIGHT
    assert results[True] > 1e-3


def test_expert_gate_zeroes_chosen_experts_with_non_positive_biased_scores(hf_dirs, ncdc_side):
    one, _, _ = hf_dirs
    bias = np.full(8, -3.0)
    bias[0] = 0.5                            # one expert above zero, the second pick below
    _, params = ncdc_run(ncdc_side, "Expert Gate", one)
    params = dict(params, **{"Expert Gate/bias.weight": bias})
    spec, env, _ = ncdc_side
    run = interpret(spec.block("Expert Gate"), env, params=params)
    x = np.random.default_rng(3).normal(size=(6, 64))
    got = np.stack([run(x[t])[0] for t in range(6)])
    results = {}
    for patched in (False, True):
        model = load_hf(one, hf_module(FLOAT64, GATE_SIGN if patched else []))
        gate = model.model.layers[0].mlp.gate
        with torch.no_grad():
            gate.e_score_correction_bias.copy_(torch.from_numpy(bias))
            _, w, idx = gate(torch.from_numpy(x))
        dense = np.zeros((6, 8))
        np.put_along_axis(dense, idx.numpy(), w.numpy(), axis=1)
        results[patched] = worst(got, dense)
    assert results[True] < TIGHT
    assert results[False] > 0.1
    assert np.count_nonzero(got, axis=1).tolist() == [1] * 6   # the second pick gated to 0


def test_layer_agrees_with_single_pass_scheduling(hf_dirs, ncdc_side):
    one, _, _ = hf_dirs
    run, _ = ncdc_run(ncdc_side, "Sliding Window Layer", one)
    c0, streams = inputs()
    c_out, s_out = run(c0, streams)
    model = load_hf(one, hf_module(FLOAT64, SCHEDULING), q_norm=False)
    hf_out, hf_pre, _ = run_layer(model, streams, c0)
    assert worst(s_out, hf_out) < TIGHT
    assert worst(c_out, hf_pre) < TIGHT
    own = load_hf(one, hf_module(FLOAT64), q_norm=False)   # HF's own scheduling
    hf_own, _, _ = run_layer(own, streams)
    assert worst(s_out, hf_own) > 1e-3


def test_hf_float32_islands_are_what_separates_1e_7(hf_dirs):
    one, _, _ = hf_dirs
    _, streams = inputs()
    f64, _, _ = run_layer(load_hf(one, hf_module(FLOAT64)), streams)
    f32, _, _ = run_layer(load_hf(one, hf_v4), streams)
    assert 1e-9 < worst(f64, f32) < 1e-5


# ------------------------------------------------------------------ layouts and shards


def _all_params(ncdc_side, path, map_name="deepseek-v4-hf"):
    spec, env, model_specs = ncdc_side
    params, _ = interpreter_params(spec.block("Sliding Window Layer"), env, path, map_name,
                                   model_specs=model_specs)
    return params


def test_sharded_checkpoint_and_module_names_load_the_same_arrays(hf_dirs, ncdc_side, tmp_path):
    from safetensors.torch import save_file

    one, many, state = hf_dirs
    assert (many / "model.safetensors.index.json").is_file()
    assert len(list(many.glob("*.safetensors"))) > 2
    ref = _all_params(ncdc_side, one)
    assert len(ref) == 30
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "m.safetensors"))
    for path in (many, tmp_path / "m.safetensors"):
        got = _all_params(ncdc_side, path)
        assert got.keys() == ref.keys()
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


# ------------------------------------------------------------------ DeepSeek's release naming


def _fp8(w: np.ndarray):
    """E4M3 codes and float32 128x128 block multipliers amax/448 (ml_dtypes), and the float64
    values they denote."""
    R, C = math.ceil(w.shape[0] / 128), math.ceil(w.shape[1] / 128)
    s = np.zeros((R, C), np.float32)
    codes = np.zeros(w.shape, ml_dtypes.float8_e4m3fn)
    for r in range(R):
        for c in range(C):
            sl = np.s_[r * 128:(r + 1) * 128, c * 128:(c + 1) * 128]
            s[r, c] = np.float32(np.abs(w[sl]).max() / 448)
            codes[sl] = (w[sl] / np.float64(s[r, c])).astype(ml_dtypes.float8_e4m3fn)
    deq = codes.astype(np.float64) * np.repeat(np.repeat(s.astype(np.float64), 128, 0), 128, 1)[
        :w.shape[0], :w.shape[1]]
    return codes, s, deq


def _fp4(w: np.ndarray):
    """E2M1 codes packed two per byte (low nibble first) with one E8M0 scale per 32 values of
    a row (the power of two putting the row's block maximum at or under 6), and the float64
    values they denote (ml_dtypes decodes)."""
    rows, cols = w.shape
    blocks = w.reshape(rows, cols // 32, 32)
    e = np.ceil(np.log2(np.maximum(np.abs(blocks).max(-1), 1e-30) / 6.0))
    exps = (e + 127).astype(np.uint8)
    scale = exps.view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    codes = (blocks / scale[..., None]).astype(ml_dtypes.float4_e2m1fn)
    deq = (codes.astype(np.float64) * scale[..., None]).reshape(rows, cols)
    nib = codes.reshape(rows, cols).view(np.uint8) & 0xF
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8).view(np.int8)
    return packed, exps, deq


FP8_LINEARS = ("attn.wq_a", "attn.wq_b", "attn.wkv", "attn.wo_a", "attn.wo_b",
               "ffn.shared_experts.w1", "ffn.shared_experts.w2", "ffn.shared_experts.w3")


def test_release_layout_with_fp8_block_scales_and_fp4_experts(hf_dirs, ncdc_side, tmp_path):
    """HF's saved tensors renamed to DeepSeek's release names (no ``model.`` prefix), the
    dense linears as FP8 with ``.scale`` block multipliers, the routed experts as packed FP4
    with E8M0 ``.scale``: loaded through ``deepseek-v4`` they give exactly the arrays the
    dequantized float64 values give through ``deepseek-v4-hf``, and the layer agrees with
    HF's (patched as above) loaded with those values."""
    from safetensors.torch import load_file, save_file

    one, _, _ = hf_dirs
    saved = load_file(str(one / "model.safetensors"))
    release, plain = {}, {}
    for name, t in saved.items():
        rel = name.removeprefix("model.").replace("embed_tokens", "embed") \
            .replace("hc_head.hc_", "hc_head_")
        stem = rel.removesuffix(".weight")
        w = t.numpy()
        if stem.removeprefix("layers.0.") in FP8_LINEARS:
            codes, s, deq = _fp8(w)
            release[rel] = torch.from_numpy(codes.view(np.uint8)).view(torch.float8_e4m3fn)
            release[stem + ".scale"] = torch.from_numpy(s)
        elif ".experts." in rel:
            packed, exps, deq = _fp4(w)
            release[rel] = torch.from_numpy(packed)
            release[stem + ".scale"] = torch.from_numpy(exps).view(torch.float8_e8m0fnu)
        else:
            release[rel], deq = t, w
        plain[name] = torch.from_numpy(np.ascontiguousarray(deq))
    save_file(release, str(tmp_path / "release.safetensors"))
    dq = tmp_path / "dequantized"
    dq.mkdir()
    save_file(plain, str(dq / "model.safetensors"))
    (dq / "config.json").write_text((one / "config.json").read_text())
    got = _all_params(ncdc_side, tmp_path / "release.safetensors", "deepseek-v4")
    want = _all_params(ncdc_side, dq)
    assert got.keys() == want.keys() and len(got) == 30
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    spec, env, _ = ncdc_side
    c0, streams = inputs(seed=5)
    _, s_out = interpret(spec.block("Sliding Window Layer"), env, params=got)(c0, streams)
    hf_out, _, _ = run_layer(load_hf(dq, hf_module(FLOAT64, SCHEDULING), q_norm=False),
                             streams, c0)
    assert worst(s_out, hf_out) < TIGHT
    from ncdc.cli import main

    assert main(["eval", "--params", str(tmp_path / "release.safetensors"), "--map",
                 "deepseek-v4", "--config", str(one / "config.json"), "--block",
                 "Expert Gate"]) == 0


# ------------------------------------------------------------------ the command line


def test_ncdc_run_on_the_checkpoint_directory_with_its_config(hf_dirs, tmp_path, capsys):
    """The three commands of docs/checkpoints.md: the HF directory, the built-in map, the
    directory's config.json for the sizes and constants; a float64 run agrees with HF's layer
    (patched as above)."""
    from ncdc.cli import main

    one, _, _ = hf_dirs
    c0, streams = inputs(seed=7)
    np.savez(tmp_path / "in.npz", in0=c0, in1=streams)
    rc = main(["run", "--params", str(one), "--map", "deepseek-v4-hf", "--config",
               str(one / "config.json"), "--block", "Sliding Window Layer", "--dtype",
               "float64", "--inputs", str(tmp_path / "in.npz"), "--out",
               str(tmp_path / "out.npz")])
    assert rc == 0, capsys.readouterr().err
    out = np.load(tmp_path / "out.npz")
    hf_out, hf_pre, _ = run_layer(load_hf(one, hf_module(FLOAT64, SCHEDULING), q_norm=False),
                                  streams, c0)
    assert worst(out["out1"], hf_out) < TIGHT
    assert worst(out["out0"], hf_pre) < TIGHT
