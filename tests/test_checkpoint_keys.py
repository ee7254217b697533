"""Weights files from any root (a block loads from a whole-model file, in the interpreter and
in ``ncdc run``), the storage policy applied alike on both sides, and hostile checkpoint
files refused with typed errors."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from ncdc.cli import main
from tests.conftest import TRANSFORMER

T = str(TRANSFORMER)
FF = "Feed Forward"
PRE = "Transformer Layer@2/Add \\& Norm~1/Feed Forward"


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "model.npz"
    assert main(["eval", T, "--save-params", str(path), "--seed", "5"]) == 0
    return path


def _eval(capsys, out, *argv):
    rc = main(["eval", T, "--block", FF, "--out", str(out), *argv])
    _, err = capsys.readouterr()
    assert rc == 0, err
    return np.load(out)["out0"], err


def test_eval_reads_a_block_from_a_whole_model_file(tmp_path, capsys, whole):
    from ncdc.interpreter.weights import load_params, save_params

    x = tmp_path / "x.npz"
    np.savez(x, in0=np.random.default_rng(0).normal(size=(4, 4)))
    every = load_params(whole)
    own = {k.replace(PRE, FF): v for k, v in every.items() if k.startswith(PRE)}
    cut = tmp_path / "own.npz"
    save_params(own, cut)
    want, _ = _eval(capsys, tmp_path / "a.npz", "--params", str(cut), "--inputs", str(x))
    got, err = _eval(capsys, tmp_path / "b.npz", "--params", str(whole), "--inputs", str(x),
                     "--key-prefix", PRE)
    np.testing.assert_array_equal(got, want)
    assert f"keys are under '{PRE}/'" in err
    first, _ = _eval(capsys, tmp_path / "c.npz", "--params", str(whole), "--inputs", str(x))
    assert not np.array_equal(first, want)          # default: the first iteration, @0


def test_storage_policy_alike_in_run_and_eval(tmp_path, capsys, whole):
    x = tmp_path / "x.npz"
    np.savez(x, in0=np.random.default_rng(1).normal(size=(4, 4)))
    common = ["--params", str(whole), "--inputs", str(x), "--weights", "mxfp4"]
    ref, _ = _eval(capsys, tmp_path / "e.npz", *common)
    plain, _ = _eval(capsys, tmp_path / "p.npz", "--params", str(whole), "--inputs", str(x))
    assert not np.allclose(ref, plain)              # the policy changed the weights
    out = tmp_path / "r.npz"
    rc = main(["run", T, "--block", FF, "--dtype", "float64", "--out", str(out), *common])
    _, err = capsys.readouterr()
    assert rc == 0, err
    np.testing.assert_allclose(np.load(out)["out0"], ref, rtol=1e-12, atol=1e-12)


def _safetensors(path, header: dict, data: bytes = b"") -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


@pytest.mark.parametrize("header, data, words", [
    ({"w": {"dtype": "F32", "shape": [10**12], "data_offsets": [0, 4]}}, b"\0" * 4,
     "needs 4000000000000 bytes"),
    ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8,
     "outside the 8 data bytes"),
    ({"w": {"dtype": "PICKLE", "shape": [1], "data_offsets": [0, 1]}}, b"\0", "unsupported"),
    ({"w": {"dtype": "F32", "shape": "x", "data_offsets": [0, 4]}}, b"\0" * 4,
     "malformed shape"),
])
def test_hostile_checkpoint_headers_are_typed_errors(tmp_path, capsys, header, data, words):
    path = tmp_path / "bad.safetensors"
    _safetensors(path, header, data)
    cmap = tmp_path / "m.toml"
    cmap.write_text("[[rules]]\ntensor = 'w'\nkey = 'Embedding/E.table'\n")
    rc = main(["run", T, "--params", str(path), "--map", str(cmap), "--json"])
    e = json.loads(capsys.readouterr().out)["error"]
    assert rc == 1 and e["type"] == "CheckpointError" and words in e["message"], e


@pytest.mark.slow
def test_truncated_and_garbage_files(tmp_path, capsys):
    cmap = tmp_path / "m.toml"
    cmap.write_text("[[rules]]\ntensor = 'w'\nkey = 'Embedding/E.table'\n")
    for name, content in (("short.safetensors", b"\x01\x02"),
                          ("huge.safetensors", struct.pack("<Q", 2**40) + b"{}"),
                          ("nojson.safetensors", struct.pack("<Q", 3) + b"{x}")):
        p = tmp_path / name
        p.write_bytes(content)
        rc = main(["run", T, "--params", str(p), "--map", str(cmap)])
        err = capsys.readouterr().err
        assert rc == 1 and err.startswith("error: cannot read checkpoint"), (name, err)
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "../outside.safetensors"}}))
    rc = main(["run", T, "--params", str(index), "--map", str(cmap)])
    assert rc == 1 and "outside the index's directory" in capsys.readouterr().err
