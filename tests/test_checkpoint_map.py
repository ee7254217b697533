"""Checkpoint maps: a small checkpoint in DeepSeek-V3's published naming (per-expert
gate_proj/up_proj/down_proj, FP8 E4M3 weights with 128x128 float32 ``weight_scale_inv``
blocks, sharded over three files with an index) loaded through the shipped example map into
the bundled spec's Mixture of Experts, checked against the reference interpreter given the same
dequantized weights; the dequantization checked against numpy and ml_dtypes."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ncdc.cli import main
from tests.lazy import ml_dtypes

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "examples" / "checkpoint_maps" / "deepseek_v3_layer0.toml"
MOE = "Sliding Window Layer / Single-Pass mHC~1 / Mixture of Experts"
SIZES = {"f": 160}          # 160 = one full and one partial 128-block
PRESET = "medium"           # m = 512, e = 32
L0 = "model.layers.0."


def fp8_blocks(w: np.ndarray, block: int = 128):
    """DeepSeek-V3's FP8 format, written independently: per 128x128 block a float32
    multiplier amax/448, codes = w / multiplier rounded to E4M3 (ml_dtypes). Returns (codes,
    scale_inv, the float64 values the pair denotes)."""
    rows, cols = w.shape
    R, C = math.ceil(rows / block), math.ceil(cols / block)
    s = np.zeros((R, C), np.float32)
    codes = np.zeros(w.shape, ml_dtypes.float8_e4m3fn)
    deq = np.zeros(w.shape)
    for r in range(R):
        for c in range(C):
            sl = np.s_[r * block:(r + 1) * block, c * block:(c + 1) * block]
            s[r, c] = np.float32(max(np.abs(w[sl]).max(), 1e-12) / 448.0)
            codes[sl] = (w[sl] / np.float64(s[r, c])).astype(ml_dtypes.float8_e4m3fn)
            deq[sl] = codes[sl].astype(np.float64) * np.float64(s[r, c])
    return codes, s, deq


def _torch(a):
    import torch

    if a.dtype == ml_dtypes.float8_e4m3fn:
        return torch.from_numpy(a.view(np.uint8).copy()).view(torch.float8_e4m3fn)
    return torch.from_numpy(np.ascontiguousarray(a))


def write_sharded(tensors: dict, directory: Path, shards: int = 3) -> Path:
    """``tensors`` written round-robin into ``shards`` safetensors files with an index."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    files = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    weight_map = {}
    for i, f in enumerate(files):
        part = {n: _torch(tensors[n]) for n in names[i::shards]}
        save_file(part, str(directory / f))
        weight_map.update(dict.fromkeys(part, f))
    index = directory / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return index


def deepseek_moe(m: int, f: int, e: int, seed: int = 0, extra: bool = True):
    """(checkpoint tensors in DeepSeek-V3 naming, the MoE's interpreter params (block keys)
    holding exactly the dequantized values)."""
    rng = np.random.default_rng(seed)
    t, ref = {}, {}

    def fp8(name, w):
        codes, s, deq = fp8_blocks(w)
        t[name], t[name + "_scale_inv"] = codes, s
        return deq

    router = rng.normal(size=(e, m)).astype(np.float32)
    bias = rng.normal(size=e).astype(np.float32)
    t[L0 + "mlp.gate.weight"], t[L0 + "mlp.gate.e_score_correction_bias"] = router, bias
    ref["Mixture of Experts/Expert Gate/W^{R}.weight"] = router.T.astype(np.float64)
    ref["Mixture of Experts/Expert Gate/bias.weight"] = bias.astype(np.float64)
    wg, wu, wd = np.zeros((m, e, f)), np.zeros((m, e, f)), np.zeros((f, e, m))
    for i in range(e):
        p = f"{L0}mlp.experts.{i}."
        wg[:, i, :] = fp8(p + "gate_proj.weight", rng.normal(size=(f, m)) / m ** 0.5).T
        wu[:, i, :] = fp8(p + "up_proj.weight", rng.normal(size=(f, m)) / m ** 0.5).T
        wd[:, i, :] = fp8(p + "down_proj.weight", rng.normal(size=(m, f)) / f ** 0.5).T
    ref["Mixture of Experts/Routed Experts/W^{G}.weight"] = wg
    ref["Mixture of Experts/Routed Experts/W^{U}.weight"] = wu
    ref["Mixture of Experts/Routed Experts/W^{D}.weight"] = wd
    for proj, (a, b), key in (("gate_proj", (f, m), "W^{Gs}"), ("up_proj", (f, m), "W^{Us}"),
                              ("down_proj", (m, f), "W^{Ds}")):
        deq = fp8(f"{L0}mlp.shared_experts.{proj}.weight", rng.normal(size=(a, b)) / b ** 0.5)
        ref[f"Mixture of Experts/Shared Expert/{key}.weight"] = deq.T
    if extra:  # tensors of the model outside the MoE, and ones the map ignores
        t["model.embed_tokens.weight"] = rng.normal(size=(16, m)).astype(np.float32)
        t[L0 + "post_attention_layernorm.weight"] = np.ones(m, np.float32)
        t["model.layers.1.mlp.gate.weight"] = router.copy()
        t["lm_head.weight"] = rng.normal(size=(16, m)).astype(np.float32)
    return t, ref


@pytest.fixture(scope="module")
def bundled_moe(bundled):
    binding = bundled.bind(PRESET, SIZES)
    block = bundled.block(MOE)
    m, e, f = (binding.env.size(s) for s in
               bundled.params(block, binding)[2].shape)  # W^{G}: [m, k/e, f]
    return block, binding, (m, f, e)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, bundled_moe):
    _, _, (m, f, e) = bundled_moe
    tensors, ref = deepseek_moe(m, f, e)
    index = write_sharded(tensors, tmp_path_factory.mktemp("ckpt"))
    return index, tensors, ref


def _size_args():
    return ["--preset", PRESET] + [a for k, v in SIZES.items() for a in ("--size", f"{k}={v}")]


def test_sizes_exercise_partial_blocks(bundled_moe, checkpoint):
    _, _, (m, f, e) = bundled_moe
    assert (m, f, e) == (512, 160, 32) and f % 128
    index, tensors, _ = checkpoint
    assert tensors[L0 + "mlp.experts.0.gate_proj.weight_scale_inv"].shape == (2, 4)
    files = json.loads(index.read_text())["weight_map"]
    assert len(set(files.values())) == 3


@pytest.mark.slow
def test_fp8_dequantization_matches_numpy_and_ml_dtypes(checkpoint):
    """The mapped source's W^{G} equals the independent numpy dequantization exactly (float64
    work dtype), and the codes it read are the ml_dtypes E4M3 bytes that were written."""
    import torch

    from ncdc.checkpoint.files import open_source

    index, tensors, ref = checkpoint
    src = open_source(index, MAP, dtype="float64")
    key = "Sliding Window Layer/Single-Pass mHC~1/Mixture of Experts/Routed Experts/W^{G}.weight"
    want = ref["Mixture of Experts/Routed Experts/W^{G}.weight"]
    got = src.get(key, want.shape).numpy()
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want)
    raw = src.files.get(L0 + "mlp.experts.5.up_proj.weight")
    assert raw.dtype == torch.float8_e4m3fn
    codes = tensors[L0 + "mlp.experts.5.up_proj.weight"]
    np.testing.assert_array_equal(raw.view(torch.uint8).numpy(), codes.view(np.uint8))
    # an independent decode of one block: code bits -> value by the E4M3 formula
    b = codes.view(np.uint8)[:128, :128].astype(np.int64)
    sign, exp, man = b >> 7, (b >> 3) & 15, b & 7
    val = np.where(exp == 0, man / 8 * 2.0 ** -6, (1 + man / 8) * 2.0 ** (exp - 7))
    np.testing.assert_array_equal(np.where(sign, -val, val), codes[:128, :128].astype(np.float64))
    src.close()


@pytest.mark.slow
def test_run_through_the_example_map_matches_the_interpreter(tmp_path, capsys, bundled,
                                                             bundled_moe, checkpoint):
    import ncdc

    block, _, (m, f, e) = bundled_moe
    index, _, ref = checkpoint
    x = np.random.default_rng(7).normal(size=(4, m)).astype(ml_dtypes.bfloat16)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, in0=x.astype(np.float64))
    out = tmp_path / "out.npz"
    rc = main(["run", "--block", MOE, *_size_args(), "--params", str(index), "--map", str(MAP),
               "--dtype", "float64", "--inputs", str(inputs), "--out", str(out)])
    text, err = capsys.readouterr()
    assert rc == 0, err
    assert "8 tensor(s) from" in text and "keys under 'Sliding Window Layer/" in text
    run = ncdc.interpret(block, spec=bundled, preset=PRESET, sizes=SIZES, params=ref)
    (want,) = run(x.astype(np.float64))
    got = np.load(out)["out0"]
    assert np.abs(want).max() > 0.05
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # the interpreter loads the same checkpoint through the same map
    ev = tmp_path / "ev.npz"
    rc = main(["eval", "--block", MOE, *_size_args(), "--params", str(index), "--map", str(MAP),
               "--inputs", str(inputs), "--out", str(ev)])
    _, err = capsys.readouterr()
    assert rc == 0, err
    # Same values, but the map loads C-ordered arrays where ``ref`` holds transposed views, so
    # BLAS sums the products in other orders: not bit equality, the bound on two orders of one
    # float64 sum instead. An output element accumulates sums over m (gate, up), f (down) and
    # the e experts; two orders of sums of length n differ by at most 2 gamma_n times the sum of
    # the terms' magnitudes, taken here as the output's scale.
    n = m + f + e
    gamma = n * 2.0 ** -53 / (1 - n * 2.0 ** -53)
    bound = 2 * gamma * np.abs(want).max()
    assert 1e-14 < bound < 1e-12  # a wrong weight or expert would differ by ~0.1
    np.testing.assert_allclose(np.load(ev)["out0"], want, rtol=0, atol=bound)


@pytest.mark.slow
def test_a_sub_block_loads_from_the_whole_model_checkpoint(capsys, bundled_moe, checkpoint):
    index, _, _ = checkpoint
    rc = main(["run", "--block", MOE + " / Routed Experts", *_size_args(), "--params",
               str(index), "--map", str(MAP), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    r = json.loads(out)
    assert r["loaded"] == 3 and r["key_prefix"].endswith("Mixture of Experts/Routed Experts/")
    assert r["outputs"][0]["shape"] == [32, 512]


def _map(tmp_path, text: str) -> Path:
    p = tmp_path / "m.toml"
    p.write_text(text)
    return p


def _run_err(capsys, *argv):
    rc = main(["run", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)["error"]


@pytest.mark.slow
def test_unmapped_and_missing_tensors_are_listed_at_once(tmp_path, capsys, checkpoint):
    tensors = dict(checkpoint[1])  # deepseek_moe(m, f, e, extra=True)'s, shared
    del tensors[L0 + "mlp.experts.3.down_proj.weight"]
    del tensors[L0 + "mlp.experts.3.down_proj.weight_scale_inv"]
    index = write_sharded(tensors, tmp_path / "a", shards=2)
    text = MAP.read_text().replace("'lm_head\\.weight',", "")
    rc, e1 = _run_err(capsys, "--block", MOE, *_size_args(), "--params", str(index), "--map",
                      str(_map(tmp_path, text)))
    assert rc == 1 and e1["type"] == "CheckpointError"
    assert "1 checkpoint tensor(s) match no rule" in e1["message"]
    assert "'lm_head.weight'" in e1["message"]
    rc, e2 = _run_err(capsys, "--block", MOE, *_size_args(), "--params", str(index), "--map",
                      str(MAP))
    assert rc == 1 and "W^{D}.weight" in e2["message"] and "routed down" in e2["message"]
    assert "missing indices '3'" in e2["message"]
    # a learned array no rule produces: every one listed
    text = "[[rules]]".join(chunk for chunk in MAP.read_text().split("[[rules]]")
                            if "shared_experts" not in chunk)
    text = text.replace("ignore = [", "ignore = ['.*shared_experts.*',")
    rc, e3 = _run_err(capsys, "--block", MOE, *_size_args(), "--params", str(index), "--map",
                      str(_map(tmp_path, text)))
    assert rc == 1 and e3["message"].startswith("3 learned array(s) not in the weights")
    assert all(f"Shared Expert/{w}.weight" in e3["message"] for w in ("W^{Gs}", "W^{Us}",
                                                                      "W^{Ds}"))


@pytest.mark.slow
def test_wrong_scale_shape_names_tensor_and_rule(tmp_path, capsys, checkpoint):
    tensors = dict(checkpoint[1])
    tensors[L0 + "mlp.experts.2.gate_proj.weight_scale_inv"] = np.ones((1, 4), np.float32)
    index = write_sharded(tensors, tmp_path / "b")
    rc, err = _run_err(capsys, "--block", MOE, *_size_args(), "--params", str(index), "--map",
                       str(MAP))
    assert rc == 1
    msg = err["message"]
    assert "experts.2.gate_proj.weight" in msg and "routed gate" in msg
    assert "scale shape (1, 4), expected (2, 4)" in msg


@pytest.mark.slow
def test_map_problems_are_reported_together(tmp_path, capsys, checkpoint):
    index, _, _ = checkpoint
    bad = _map(tmp_path, """
colour = "blue"
[[rules]]
tensor = 'model\\.(?P<x>\\d+'
key = 'a'
[[rules]]
tensor = 'model\\.experts\\.(?P<i>\\d+)\\.w'
key = 'b/${j}'
stack = { index = "k", axis = 0 }
permute = [0, 0]
""")
    rc, err = _run_err(capsys, "--params", str(index), "--map", str(bad))
    assert rc == 2 and err["type"] == "MapError"
    msg = err["message"]
    assert "4 problem(s)" not in msg  # counted exactly below
    for part in ("unknown field 'colour'", "not a valid regex", "stack index 'k'",
                 "not a permutation", "${j}"):
        assert part in msg, part


def test_split_fused_tensor(tmp_path, bundled, bundled_moe):
    """A fused [gate; up] tensor split in two along its output axis."""
    import torch

    from ncdc.checkpoint.files import open_source

    _, _, (m, f, _) = bundled_moe
    rng = np.random.default_rng(3)
    g, u = rng.normal(size=(f, m)), rng.normal(size=(f, m))
    from safetensors.torch import save_file

    path = tmp_path / "fused.safetensors"
    save_file({"shared.gate_up_proj.weight": torch.from_numpy(np.concatenate([g, u]))},
              str(path))
    cmap = _map(tmp_path, """
[[rules]]
tensor = 'shared\\.gate_up_proj\\.weight'
split = { axis = 0, keys = ['S/W^{Gs}.weight', 'S/W^{Us}.weight'] }
transpose = true
""")
    src = open_source(path, cmap, dtype="float64")
    np.testing.assert_array_equal(src.get("S/W^{Gs}.weight", (m, f)).numpy(), g.T)
    np.testing.assert_array_equal(src.get("S/W^{Us}.weight", (m, f)).numpy(), u.T)


@pytest.mark.slow
def test_storage_policy_on_a_mapped_checkpoint(tmp_path, capsys, checkpoint, bundled_moe):
    """--weights mxfp4 for the routed experts, mxfp8 elsewhere: the module (weights held in
    the formats, or rounded through them) and the interpreter, both loading the checkpoint
    through the map, agree."""
    index, _, _ = checkpoint
    _, _, (m, _, _) = bundled_moe
    inputs = tmp_path / "in.npz"
    x = np.random.default_rng(9).normal(size=(3, m)).astype(ml_dtypes.bfloat16)
    np.savez(inputs, in0=x.astype(np.float64))
    policy = ["--weights", "*/Routed Experts/*=mxfp4", "--weights", "mxfp8"]
    common = ["--block", MOE, *_size_args(), "--params", str(index), "--map", str(MAP),
              "--inputs", str(inputs), *policy]
    ev, plain, out = tmp_path / "ev.npz", tmp_path / "plain.npz", tmp_path / "run.npz"
    assert main(["eval", *common, "--out", str(ev)]) == 0
    assert main(["eval", *common[:-4], "--out", str(plain)]) == 0
    rc = main(["run", *common, "--dtype", "float64", "--out", str(out)])
    _, err = capsys.readouterr()
    assert rc == 0, err
    want = np.load(ev)["out0"]
    assert not np.allclose(want, np.load(plain)["out0"], rtol=1e-3)   # the formats matter
    np.testing.assert_allclose(np.load(out)["out0"], want, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_a_json_map_and_a_shape_error_naming_the_rule(tmp_path, capsys, checkpoint):
    """The example map as JSON loads the same; a rule that forgets its transpose fails on the
    first expert with the tensor, the rule and both shapes."""
    import tomllib

    index, _, _ = checkpoint
    doc = tomllib.loads(MAP.read_text())
    as_json = tmp_path / "m.json"
    as_json.write_text(json.dumps(doc))
    rc = main(["run", "--block", MOE + " / Routed Experts", *_size_args(), "--params",
               str(index), "--map", str(as_json), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert json.loads(out)["loaded"] == 3
    for rule in doc["rules"]:
        if rule.get("name") == "routed up":
            del rule["transpose"]
    as_json.write_text(json.dumps(doc))
    rc, e = _run_err(capsys, "--block", MOE + " / Routed Experts", *_size_args(), "--params",
                     str(index), "--map", str(as_json))
    assert rc == 1 and e["type"] == "CheckpointError"
    assert "W^{U}.weight: tensor 'model.layers.0.mlp.experts.0.up_proj.weight'" in e["message"]
    assert "rule 7 (routed up)" in e["message"]
    assert "shape (160, 512) after the rule's transforms, expected (512, 160) (the axes" in e["message"]
