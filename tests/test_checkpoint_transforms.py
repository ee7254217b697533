"""The map transforms real checkpoints need, checked against independent computations: FP4
E2M1 codes packed two to a byte with per-32 E8M0 scales (ml_dtypes' float4_e2m1fn and
float8_e8m0fnu decode them), FP8 128x128 block scales and FP4 per-32 scales in one map, a
tensor multiplied by a slice of another, and the built-in maps by name."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from ncdc.checkpoint.builtin import BUILTIN, builtin_path
from ncdc.checkpoint.errors import CheckpointError, MapError
from ncdc.checkpoint.mapped import MappedSource
from ncdc.checkpoint.mapping import load_map, parse_map
from ncdc.checkpoint.transforms import dequantize
from tests.lazy import ml_dtypes, torch


class DictFiles:
    """Checkpoint tensors held in a dict (the source protocol MappedSource reads)."""

    path = "mem"

    def __init__(self, tensors):
        self.tensors, self.metadata, self.reads = dict(tensors), {}, []

    def names(self):
        return list(self.tensors)

    def __contains__(self, name):
        return name in self.tensors

    def get(self, name):
        self.reads.append(name)
        return self.tensors[name].clone()

    def expect(self, names):
        pass

    def close(self):
        pass


def fp4_pack(values: np.ndarray) -> np.ndarray:
    """E2M1 values -> bytes, element 2i in the low nibble (codes from ml_dtypes' own
    float4_e2m1fn bit patterns)."""
    codes = values.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def fp4_weight(rows: int, cols: int, seed: int = 0):
    """(packed int8 codes, E8M0 scale bytes [rows, cols/32], float64 values they denote) of a
    random weight, the values decoded by ml_dtypes."""
    rng = np.random.default_rng(seed)
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float64)
    vals = rng.choice(grid, size=(rows, cols)) * rng.choice([-1, 1], size=(rows, cols))
    exps = rng.integers(120, 134, size=(rows, math.ceil(cols / 32))).astype(np.uint8)
    scale = exps.view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    deq = vals.astype(ml_dtypes.float4_e2m1fn).astype(np.float64) * np.repeat(scale, 32, 1)[:, :cols]
    return fp4_pack(vals).view(np.int8), exps, deq


@pytest.mark.parametrize("scale_dtype", ["uint8", "float8_e8m0fnu"])
def test_fp4_unpacking_matches_ml_dtypes(scale_dtype):
    packed, exps, want = fp4_weight(5, 96)
    scale = torch.from_numpy(exps)
    if scale_dtype != "uint8":
        scale = scale.view(torch.float8_e8m0fnu)
    got = dequantize(torch.from_numpy(packed), scale, (1, 32), torch.float64, "w", codes="e2m1")
    assert got.shape == (5, 96)
    np.testing.assert_array_equal(got.numpy(), want)


def test_fp4_unpacking_reads_the_low_nibble_first():
    byte = torch.tensor([[0x72]], dtype=torch.uint8)   # low 0x2 = 1.0, high 0x7 = 6.0
    one = torch.tensor([[127]], dtype=torch.uint8)      # E8M0 2**0
    got = dequantize(byte, one, (1, 32), torch.float64, "w", codes="e2m1")
    assert got.tolist() == [[1.0, 6.0]]


def test_fp4_codes_in_float4_x2_storage_unpack_the_same():
    packed, exps, want = fp4_weight(3, 64, seed=2)
    x2 = torch.from_numpy(packed.view(np.uint8)).view(torch.float4_e2m1fn_x2)
    got = dequantize(x2, torch.from_numpy(exps), (1, 32), torch.float32, "w", codes="e2m1")
    np.testing.assert_array_equal(got.numpy(), want.astype(np.float32))


def test_fp4_refuses_float_codes():
    with pytest.raises(CheckpointError, match="int8, uint8 or float4_e2m1fn_x2"):
        dequantize(torch.zeros(2, 2), torch.zeros(2, 1, dtype=torch.uint8), (1, 32),
                   torch.float64, "w", codes="e2m1")


def _fp8(w: np.ndarray):
    """DeepSeek's FP8: per 128x128 block a float32 multiplier amax/448, E4M3 codes."""
    R, C = math.ceil(w.shape[0] / 128), math.ceil(w.shape[1] / 128)
    s = np.zeros((R, C), np.float32)
    codes = np.zeros(w.shape, ml_dtypes.float8_e4m3fn)
    deq = np.zeros(w.shape)
    for r in range(R):
        for c in range(C):
            sl = np.s_[r * 128:(r + 1) * 128, c * 128:(c + 1) * 128]
            s[r, c] = np.float32(np.abs(w[sl]).max() / 448)
            codes[sl] = (w[sl] / np.float64(s[r, c])).astype(ml_dtypes.float8_e4m3fn)
            deq[sl] = codes[sl].astype(np.float64) * np.float64(s[r, c])
    return torch.from_numpy(codes.view(np.uint8)).view(torch.float8_e4m3fn), s, deq


def test_fp8_block_scales_and_fp4_per_32_scales_in_one_map():
    cmap = parse_map({
        "dequantize": {"scale": "${stem}.scale", "block": [128, 128]},
        "schemes": {"fp4": {"codes": "e2m1", "scale": "${stem}.scale", "block": [1, 32]}},
        "rules": [{"tensor": r"dense\.weight", "key": "D.weight"},
                  {"tensor": r"experts\.(?P<e>\d+)\.weight", "key": "E.weight",
                   "stack": {"index": "e", "axis": 0}, "dequantize": "fp4"}]})
    rng = np.random.default_rng(0)
    codes, s, deq = _fp8(rng.normal(size=(200, 160)))
    tensors = {"dense.weight": codes, "dense.scale": torch.from_numpy(s)}
    want = []
    for e in range(3):
        packed, exps, w = fp4_weight(4, 64, seed=e)
        tensors[f"experts.{e}.weight"] = torch.from_numpy(packed)
        tensors[f"experts.{e}.scale"] = torch.from_numpy(exps).view(torch.float8_e8m0fnu)
        want.append(w)
    src = MappedSource(DictFiles(tensors), cmap, torch.float64)
    assert sorted(src.names()) == ["D.weight", "E.weight"]
    np.testing.assert_array_equal(src.get("D.weight", (200, 160)).numpy(), deq)
    np.testing.assert_array_equal(src.get("E.weight", (3, 4, 64)).numpy(), np.stack(want))


def test_fp4_without_its_scale_is_reported():
    cmap = parse_map({"schemes": {"fp4": {"codes": "e2m1", "scale": "${stem}.scale",
                                          "block": [1, 32]}},
                      "rules": [{"tensor": r"w\.weight", "key": "W.weight",
                                 "dequantize": "fp4"}]})
    with pytest.raises(CheckpointError, match="FP4 codes need their scale tensor 'w.scale'"):
        MappedSource(DictFiles({"w.weight": torch.zeros(2, 16, dtype=torch.int8)}), cmap)


def test_multiply_by_a_slice_of_another_tensor_per_split_part():
    cmap = parse_map({"rules": [{
        "tensor": r"hc\.fn", "transpose": True,
        "split": {"axis": 0, "sizes": [1, 1, 2], "keys": ["A", "B", "C"]},
        "multiply": {"tensor": "hc.scale", "index": [0, 1, 2]}}]})
    fn = torch.arange(12, dtype=torch.float64).reshape(4, 3)
    scale = torch.tensor([2.0, -3.0, 0.5], dtype=torch.float64)
    files = DictFiles({"hc.fn": fn, "hc.scale": scale})
    src = MappedSource(files, cmap, torch.float64)
    assert sorted(src.names()) == ["A", "B", "C"]           # hc.scale is accounted for
    f = fn.numpy()
    np.testing.assert_array_equal(src.get("A", (3, 1)).numpy(), (f[:1] * 2.0).T)
    np.testing.assert_array_equal(src.get("B", (3, 1)).numpy(), (f[1:2] * -3.0).T)
    np.testing.assert_array_equal(src.get("C", (3, 2)).numpy(), (f[2:] * 0.5).T)


def test_a_missing_or_misfitting_factor_is_a_checkpoint_error():
    cmap = parse_map({"rules": [{"tensor": r"w", "key": "W",
                                 "multiply": {"tensor": "s", "index": 0}}]})
    with pytest.raises(CheckpointError, match="names 's', which the checkpoint lacks"):
        MappedSource(DictFiles({"w": torch.ones(2, 3)}), cmap)
    src = MappedSource(DictFiles({"w": torch.ones(2, 3), "s": torch.ones(4, 2)}), cmap)
    with pytest.raises(CheckpointError, match=r"shape \(2,\) does not broadcast"):
        src.get("W", (2, 3))


@pytest.mark.parametrize("rule, needle", [
    ({"dequantize": "nope"}, "names no scheme"),
    ({"dequantize": "fp4", "scale": "${tensor}.s"}, "not both"),
    ({"multiply": {"tensor": "${who}.scale"}}, "uses ${who}"),
    ({"multiply": {"tensor": "s", "index": [0, 1]}}, "list of 1 whole numbers"),
    ({"multiply": {"tensor": "s", "index": [-1]}}, "from 0 to"),
    ({"multiply": {"factor": "s"}}, "'multiply' is a table"),
    ({"scale": "${missing}"}, "uses ${missing}"),
])
def test_new_map_syntax_is_validated(rule, needle):
    doc = {"schemes": {"fp4": {"codes": "e2m1", "scale": "${stem}.scale", "block": [1, 32]}},
           "rules": [{"tensor": r"(?P<layer>\d+)\.w", "key": "K", **rule}]}
    with pytest.raises(MapError, match=needle.replace("$", r"\$").replace("{", r"\{")
                       .replace("(", r"\(")):
        parse_map(doc, "m.toml")


@pytest.mark.parametrize("scheme, needle", [
    ({"codes": "e3m0"}, "'codes' 'e3m0' is not one of"),
    ({"scale": "fixed"}, "containing ${tensor} or ${stem}"),
    ({"block": [0, 32]}, "from 1 to"),
    ({"extra": 1}, "is a table with"),
])
def test_schemes_are_validated(scheme, needle):
    doc = {"schemes": {"s": scheme}, "rules": [{"tensor": "w", "key": "K"}]}
    with pytest.raises(MapError, match=needle.replace("$", r"\$").replace("{", r"\{")):
        parse_map(doc, "m.toml")


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_built_in_maps_load_by_name(name):
    cmap = load_map(name)
    assert cmap.path == builtin_path(name) and cmap.rules
    keys = {k for r in cmap.rules for k in r.keys()}
    assert "Sliding Window Layer/Single-Pass mHC/Mixing Coefficients/H_{2}.weight" in keys
    assert "Sliding Window Layer/Single-Pass mHC~1/Mixture of Experts/Routed Experts/" \
           "W^{D}.weight" in keys


def test_run_help_lists_the_built_in_maps():
    out = subprocess.run([sys.executable, "-m", "ncdc", "run", "--help"], capture_output=True,
                         text=True, check=True).stdout
    flat = " ".join(out.split())
    for name in BUILTIN:
        assert f"{name}:" in flat


def test_built_in_maps_are_package_data():
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "maps/*.toml" in data["package-data"]["ncdc.checkpoint"]
    shipped = {p.stem for p in (root / "ncdc" / "checkpoint" / "maps").glob("*.toml")}
    assert shipped == set(BUILTIN)


def test_an_npz_checkpoint_serves_a_factor_read_by_several_parts(tmp_path):
    from ncdc.checkpoint.files import NpzTensors

    np.savez(tmp_path / "c.npz", **{"hc.fn": np.arange(12.0).reshape(4, 3),
                                    "hc.scale": np.array([2.0, 3.0, 4.0])})
    cmap = parse_map({"rules": [{
        "tensor": r"hc\.fn", "split": {"axis": 0, "sizes": [1, 1, 2], "keys": ["A", "B", "C"]},
        "multiply": {"tensor": "hc.scale", "index": [0, 1, 2]}}]})
    src = MappedSource(NpzTensors(tmp_path / "c.npz"), cmap, torch.float64)
    src.expect(["A", "B", "C"])
    got = [src.get(k, s).numpy() for k, s in (("A", (1, 3)), ("B", (1, 3)), ("C", (2, 3)))]
    np.testing.assert_array_equal(np.concatenate(got),
                                  np.arange(12.0).reshape(4, 3) * [[2], [3], [4], [4]])


def test_an_unknown_map_name_lists_the_built_in_ones(tmp_path, capsys):
    from ncdc.cli import main

    (tmp_path / "ckpt.safetensors").write_bytes(b"")
    rc = main(["run", "--params", str(tmp_path / "ckpt.safetensors"), "--map", "deepseek-v5"])
    err = capsys.readouterr().err
    assert rc == 2 and "names no built-in map (deepseek-v4-hf, deepseek-v4)" in err
