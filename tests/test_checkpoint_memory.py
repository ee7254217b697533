"""Loading a checkpoint of a hundred MB into a module built on the meta device keeps peak
memory near the module's own size, not module plus checkpoint: measured in a subprocess as the
growth of the peak resident set (VmHWM, reset after imports; ru_maxrss where it cannot be
reset) over the load."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_checkpoint_map import L0, MAP, write_sharded

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"m": 1024, "f": 512, "e": 64}       # 3 x 34M expert elements: 101 MB in FP8

SCRIPT = r"""
import json, sys
import ncdc
from ncdc.checkpoint.files import open_source
from ncdc.checkpoint.keys import resolve
from ncdc.checkpoint.module import build_meta, materialize
from ncdc.checkpoint.profile import peak_bytes, reset_peak, rss_bytes
from ncdc.ir.params import param_specs

index, cmap, sizes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
spec = ncdc.load()
env = spec.bind("medium", sizes).env
block = spec.block("Sliding Window Layer / Single-Pass mHC~1 / Mixture of Experts / "
                   "Routed Experts")
built = build_meta(block, env, dtype="bfloat16")
source = open_source(index, cmap, dtype="bfloat16")
key_map, prefix = resolve(list(built.specs.values()), source.names(),
                          lambda: param_specs(spec.model(), env))
import gc; gc.collect()
base = rss_bytes()
resettable = reset_peak()
report = materialize(built, source, key_map=key_map)
source.close()
print(json.dumps({"base": base, "peak": peak_bytes(), "resettable": resettable,
                  "module": report.module_bytes, "loaded": report.loaded, "prefix": prefix}))
"""


@pytest.mark.slow
def test_peak_memory_of_a_load_stays_near_the_module_size(tmp_path):
    m, f, e = SIZES["m"], SIZES["f"], SIZES["e"]
    rng = np.random.default_rng(0)
    import ml_dtypes

    tensors = {}
    for i in range(e):
        for proj, shape in (("gate_proj", (f, m)), ("up_proj", (f, m)), ("down_proj", (m, f))):
            name = f"{L0}mlp.experts.{i}.{proj}.weight"
            codes = rng.integers(0, 0x7E, size=shape, dtype=np.uint8)   # no NaN codes
            tensors[name] = codes.view(ml_dtypes.float8_e4m3fn)
            tensors[name + "_scale_inv"] = np.full((-(-shape[0] // 128), -(-shape[1] // 128)),
                                                   0.5, np.float32)
    index = write_sharded(tensors, tmp_path / "ckpt", shards=3)
    del tensors
    ckpt = sum(os.path.getsize(p) for p in (tmp_path / "ckpt").glob("*.safetensors"))
    assert 100e6 < ckpt < 105e6
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(index), str(MAP), json.dumps(SIZES)],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
                       check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    module = got["module"]
    assert got["loaded"] == 3 and module == 3 * m * f * e * 2          # bfloat16
    growth = got["peak"] - got["base"]
    # the module once, plus a bounded working set (one expert tensor dequantized, allocator
    # slack); never module + checkpoint
    assert growth < module + 64 * 2**20, (growth, module, ckpt)
    assert growth < module + ckpt / 2
    assert growth > module * 0.9                                      # the figure is real


@pytest.mark.slow
def test_fp4_experts_load_without_a_float64_copy_of_a_shard(tmp_path):
    """DeepSeek's release layout: 3 x 64 experts of packed FP4 codes (int8, two per byte) with
    one E8M0 scale per 32 values, 50 MB over three shards, through the built-in map
    ``deepseek-v4`` into a 192 MiB bfloat16 module: the codes are unpacked a few block rows at
    a time, so the peak grows by the module plus a bounded working set (a float64 copy of a
    shard would add over 250 MB)."""
    m, f, e = SIZES["m"], SIZES["f"], SIZES["e"]
    rng = np.random.default_rng(1)
    tensors = {}
    for i in range(e):
        for proj, (rows, cols) in (("w1", (f, m)), ("w3", (f, m)), ("w2", (m, f))):
            stem = f"layers.0.ffn.experts.{i}.{proj}"
            tensors[stem + ".weight"] = rng.integers(-128, 128, size=(rows, cols // 2),
                                                     dtype=np.int8)
            tensors[stem + ".scale"] = rng.integers(120, 130, size=(rows, cols // 32),
                                                    dtype=np.uint8)   # E8M0 bytes
    index = write_sharded(tensors, tmp_path / "ckpt", shards=3)
    del tensors
    ckpt = sum(os.path.getsize(p) for p in (tmp_path / "ckpt").glob("*.safetensors"))
    assert 50e6 < ckpt < 55e6
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(index), "deepseek-v4",
                        json.dumps(SIZES)], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    module = got["module"]
    assert got["loaded"] == 3 and module == 3 * m * f * e * 2
    growth = got["peak"] - got["base"]
    print(f"FP4 load: checkpoint {ckpt / 1e6:.0f} MB, module {module / 2**20:.0f} MiB, peak "
          f"growth {growth / 2**20:.0f} MiB")
    assert growth < module + 64 * 2**20, (growth, module, ckpt)
    assert growth > module * 0.9


def test_a_rank_reads_only_the_experts_of_its_slice():
    """A family stacked along the expert axis, loaded for a rank holding experts [2, 5) of 8,
    reads those three tensors (and their scales) and no other."""
    import torch

    from ncdc.checkpoint.mapped import MappedSource
    from ncdc.checkpoint.mapping import parse_map
    from tests.test_checkpoint_transforms import DictFiles

    cmap = parse_map({"schemes": {"fp4": {"codes": "e2m1", "scale": "${stem}.scale",
                                          "block": [1, 32]}},
                      "rules": [{"tensor": r"x\.(?P<e>\d+)\.weight", "key": "W",
                                 "stack": {"index": "e", "axis": 1}, "transpose": True,
                                 "dequantize": "fp4"}]})
    tensors = {}
    for i in range(8):
        tensors[f"x.{i}.weight"] = torch.full((3, 32), i, dtype=torch.int8)
        tensors[f"x.{i}.scale"] = torch.full((3, 2), 127, dtype=torch.uint8)
    files = DictFiles(tensors)
    src = MappedSource(files, cmap, torch.float32)
    got = list(src.pieces("W", (64, 8, 3), (8, 2, 5)))
    assert [ix[1] for ix, _ in got] == [2, 3, 4]
    assert sorted(files.reads) == sorted(f"x.{i}.{k}" for i in (2, 3, 4)
                                         for k in ("weight", "scale"))
    files.reads.clear()
    assert len(list(src.pieces("W", (64, 8, 3)))) == 8 and len(files.reads) == 16


def test_a_sharded_rank_loads_and_reads_only_its_experts(bundled, tmp_path, monkeypatch):
    """Rank 1 of 2 (the generated file's ``shard_experts``, its rank faked) loading a
    release-layout checkpoint through ``deepseek-v4``: it reads the FP4 tensors of experts 4-7
    only, and holds exactly the slice a one-process load holds."""
    import torch
    from safetensors.torch import save_file

    from ncdc.checkpoint.files import open_source
    from ncdc.checkpoint.keys import resolve
    from ncdc.checkpoint.module import build_meta, materialize
    from ncdc.ir.params import param_specs
    from tests.test_checkpoint_transforms import fp4_weight

    env = bundled.bind("tiny").env
    block = bundled.block("Mixture of Experts")
    m, e, f = 64, 8, 32
    rng = np.random.default_rng(0)
    p = "layers.0.ffn."
    t = {p + "gate.weight": torch.from_numpy(rng.normal(size=(e, m))),
         p + "gate.bias": torch.from_numpy(rng.normal(size=e))}
    for k, shape in (("w1", (f, m)), ("w3", (f, m)), ("w2", (m, f))):
        t[f"{p}shared_experts.{k}.weight"] = torch.from_numpy(rng.normal(size=shape))
        for i in range(e):
            packed, exps, _ = fp4_weight(*shape, seed=10 * i + len(k))
            t[f"{p}experts.{i}.{k}.weight"] = torch.from_numpy(packed)
            t[f"{p}experts.{i}.{k}.scale"] = torch.from_numpy(exps)
    path = tmp_path / "release.safetensors"
    save_file(t, str(path))
    model_specs = param_specs(bundled.model(), env)

    def load(rank=None):
        built = build_meta(block, env, dtype="float64", runtime={"distributed"})
        ns = built.namespace
        if rank is not None:
            monkeypatch.setattr(ns.dist, "get_rank", lambda group=None: rank)
            monkeypatch.setattr(ns.dist, "get_world_size", lambda group=None: 2)
            ns.shard_experts(built.module)
            built.sharded = True
        source = open_source(path, "deepseek-v4", dtype="float64")
        reads = []
        get = source.files.get
        source.files.get = lambda name: (reads.append(name), get(name))[1]
        key_map, _ = resolve(list(built.specs.values()), source.names(), model_specs)
        materialize(built, source, key_map=key_map)
        source.close()
        return built.module, reads

    whole, _ = load()
    part, reads = load(rank=1)
    experts = {int(n.split(".")[4]) for n in reads if ".experts." in n}
    assert experts == {4, 5, 6, 7}
    assert len([n for n in reads if ".experts." in n]) == 4 * 3 * 2       # codes and scales
    dims = dict(type(part.routed_experts).EXPERT_DIMS)
    for attr, dim in dims.items():
        np.testing.assert_array_equal(getattr(part.routed_experts, attr).detach().numpy(),
                                      getattr(whole.routed_experts, attr).detach()
                                      .narrow(dim, 4, 4).numpy(), err_msg=attr)
