"""Untrusted files and paths (issue 8 points 3 and 5, issue 7 point 4): spec reads are bounded,
every path is checked before use, weight/input files give typed errors naming the key, weights
keep their storage dtypes and carry metadata, duplicate keys are refused in every envelope."""
from __future__ import annotations

import json
import os
import struct
import time
import zipfile

import numpy as np
import pytest

from ncdc.cli import main
from ncdc.interpreter.weights import (
    METADATA_KEY,
    compare_metadata,
    file_metadata,
    load_params,
    read_npz,
    save_params,
)
from ncdc.ir.errors import EvaluationError, SpecFormatError
from ncdc.spec.loader import load_text, read_text
from tests.conftest import ATTENTION_CORE, TRANSFORMER
from tests.lazy import ml_dtypes

SIZES = ["--size", "k=2", "--size", "h=2", "--size", "q=3", "--size", "x=4"]


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line_error(err: str) -> bool:
    lines = err.strip().splitlines()
    return len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err


# --------------------------------------------------------------------------- spec reads


def test_spec_size_cap_and_streams(tmp_path, capsys):
    with pytest.raises(SpecFormatError, match="past the cap of 1000 bytes"):
        read_text(TRANSFORMER, max_bytes=1000)
    rc, _, err = _run(capsys, "validate", TRANSFORMER, "--max-spec-bytes", "1000")
    assert rc == 2 and "--max-spec-bytes" in err
    if os.path.exists("/dev/zero"):
        t0 = time.process_time()
        rc, _, err = _run(capsys, "validate", "/dev/zero")
        assert rc == 2 and "NUL byte at offset 0" in err
        assert time.process_time() - t0 < 2.0
    utf16 = tmp_path / "u16.json"
    utf16.write_bytes(ATTENTION_CORE.read_text(encoding="utf-8").encode("utf-16"))
    with pytest.raises(SpecFormatError, match="NUL byte"):
        read_text(utf16)


@pytest.mark.parametrize("argv, needle", [
    (["validate", "{tmp}/missing.json"], "cannot read it"),
    (["show", "{tmp}"], "is a directory"),
    (["eval", ATTENTION_CORE, *SIZES, "--out", "{tmp}/o.txt"], "must end in .npz"),
    (["eval", ATTENTION_CORE, *SIZES, "--out", "{tmp}/nodir/o.npz"], "does not exist"),
    (["eval", ATTENTION_CORE, *SIZES, "--out", "{tmp}"], "must end in .npz"),
    (["eval", ATTENTION_CORE, *SIZES, "--params", "{tmp}/p.npz"], "cannot read it"),
    (["eval", ATTENTION_CORE, *SIZES, "--inputs", "{tmp}/in.safetensors"], "must end in .npz"),
    (["compile", ATTENTION_CORE, *SIZES, "-o", "{tmp}/m.txt"], "must end in .py"),
    (["compile", ATTENTION_CORE, *SIZES, "-o", "{tmp}/nodir/m.py"], "does not exist"),
    (["graph", ATTENTION_CORE, "-o", "{tmp}/d/g.dot"], "does not exist"),
    (["eval", ATTENTION_CORE, *SIZES, "--seed", "-1"], "--seed -1"),
    (["check", ATTENTION_CORE, *SIZES, "--seeds", "0"], "--seeds 0"),
])
def test_paths_and_flags_are_checked_before_use(capsys, tmp_path, argv, needle):
    argv = [str(a).replace("{tmp}", str(tmp_path)) for a in argv]
    rc, out, err = _run(capsys, *argv)
    assert rc == 2, (rc, out, err)
    assert _one_line_error(err) and needle in err
    assert not (tmp_path / "o.txt.npz").exists()


def test_out_keeps_the_extension_it_is_given(capsys, tmp_path):
    out = tmp_path / "o.npz"
    rc, _, _ = _run(capsys, "eval", ATTENTION_CORE, *SIZES, "--out", out)
    assert rc == 0 and out.exists() and sorted(os.listdir(tmp_path)) == ["o.npz"]


# --------------------------------------------------------------------------- duplicate keys


def test_duplicate_keys_are_refused_in_every_envelope():
    text = ATTENTION_CORE.read_text(encoding="utf-8")
    dup = text.replace('"__type__": "RawAxis"', '"__type__": "RawAxis", "__type__": "RawAxis"',
                       1)
    assert dup != text
    with pytest.raises(SpecFormatError, match="repeated key '__type__'"):
        load_text(dup)
    with pytest.raises(SpecFormatError, match="repeated key '__type__'"):
        load_text(json.dumps({"msgType": "dataUpdate", "data": dup}))
    compressed = {"export_form": "compressed", "version": 1, "data": 4,
                  "value_repository": [[0, "a"], [0, 1], [0, 2], [2, [0, 1, 0, 2]], [0, 0]]}
    with pytest.raises(SpecFormatError, match="repeated key 'a'"):
        load_text(json.dumps(compressed))


# --------------------------------------------------------------------------- hostile npz files


def _npy(shape, descr="<f8", payload=b""):
    hdr = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    hdr = hdr.ljust(117) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + payload


def test_npz_member_shapes_are_checked_before_decompressing(tmp_path):
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        # declares 10^12 float64 (8 TB) but holds 8 MiB of zeros, compressed to a few KiB
        zf.writestr("in0.npy", _npy((10**6, 10**6), payload=bytes(8 << 20)))
    assert bomb.stat().st_size < 100_000
    t0 = time.process_time()
    with pytest.raises(EvaluationError, match=r"key 'in0'.*declares shape \(1000000, 1000000\)"):
        read_npz(bomb)
    assert time.process_time() - t0 < 2.0
    # an honest member whose decoded size exceeds the budget is refused before reading it
    big = tmp_path / "big.npz"
    np.savez_compressed(big, w=np.zeros(1 << 20))
    with pytest.raises(EvaluationError, match="beyond the 1000 available"):
        read_npz(big, budget=1000)


@pytest.mark.parametrize("content, needle", [
    (b"", "not an npz archive"),
    (b"PK\x03\x04garbage", "not an npz archive"),
    ("malformed", "malformed .npy header"),
    ("pickle", "pickles"),
    ("notnpy", "must be an .npy array"),
])
def test_corrupt_npz_files_are_typed_errors_naming_the_key(tmp_path, capsys, content, needle):
    p = tmp_path / "f.npz"
    if content == "malformed":
        with zipfile.ZipFile(p, "w") as zf:
            zf.writestr("in0.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': oops}\n" + b"0" * 64)
    elif content == "pickle":
        np.savez(p, in0=np.array([{"a": 1}], dtype=object))
    elif content == "notnpy":
        with zipfile.ZipFile(p, "w") as zf:
            zf.writestr("in0.txt", b"hello")
    else:
        p.write_bytes(content)
    with pytest.raises(EvaluationError, match=needle):
        load_params(p)
    for flag in ("--params", "--inputs", "--tape"):
        rc, _, err = _run(capsys, "eval", ATTENTION_CORE, *SIZES, flag, p)
        assert rc == 1 and _one_line_error(err) and needle in err, (flag, err)


# --------------------------------------------------------------------------- safetensors


def _safetensors(path, entries: dict, metadata=None):
    header, blobs, offset = {}, [], 0
    for key, (dtype, shape, raw) in entries.items():
        header[key] = {"dtype": dtype, "shape": list(shape),
                       "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


@pytest.mark.parametrize("dtype, ml", [("BF16", "bfloat16"), ("F8_E4M3", "float8_e4m3fn"),
                                       ("F8_E5M2", "float8_e5m2")])
def test_low_precision_safetensors_decode_through_ml_dtypes(tmp_path, dtype, ml):
    ml = getattr(ml_dtypes, ml)
    x = np.array([0.1, -2.5, 3.0, 448.0 if dtype == "F8_E4M3" else 1e4, 1e-3, 0.0])
    raw = x.astype(ml).tobytes()
    p = tmp_path / "w.safetensors"
    _safetensors(p, {"w": (dtype, x.shape, raw)})
    got = load_params(p)["w"]
    want = np.frombuffer(raw, dtype=ml).astype(np.float64)
    assert got.dtype == np.float64 and np.array_equal(got, want)


@pytest.mark.parametrize("entries, needle", [
    ({"w": ("F64", (10**12,), b"")}, "needs 8000000000000 bytes"),
    ({"w": ("F64", (2,), bytes(8))}, "needs 16 bytes"),
    ({"w": ("Q9", (1,), bytes(8))}, "unsupported dtype"),
    ({"w": ("F64", (-1,), bytes(8))}, "malformed shape"),
])
def test_lying_safetensors_headers_are_refused(tmp_path, entries, needle):
    p = tmp_path / "w.safetensors"
    _safetensors(p, entries)
    with pytest.raises(EvaluationError, match=needle):
        load_params(p)
    p.write_bytes(struct.pack("<Q", 2**60) + b"{}")
    with pytest.raises(EvaluationError, match="header claims"):
        load_params(p)


# --------------------------------------------------------------------------- writing weights


def test_weights_keep_their_storage_dtype_and_carry_metadata(tmp_path):
    rng = np.random.default_rng(0)
    # values the storage formats hold exactly (rounded here with ml_dtypes), and one that not
    w = rng.standard_normal((3, 4)).astype(ml_dtypes.bfloat16).astype(np.float64)
    b = rng.standard_normal(5).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    lossy = rng.standard_normal(3)
    assert not np.array_equal(lossy.astype(ml_dtypes.bfloat16).astype(np.float64), lossy)
    params = {"a/w.weight": w, "b.bias": b, "c.weight": lossy,
              "n.table": np.arange(6, dtype=np.int64)}
    storage = {"a/w.weight": "BF16", "b.bias": "F8_E4M3", "c.weight": "BF16", "n.table": None}
    meta = file_metadata("abc", {"k": "2"}, "exact", "0.2.0")
    p = tmp_path / "w.safetensors"
    save_params(params, p, storage, meta)
    raw = p.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])  # the file's own header, read independently
    assert header["a/w.weight"]["dtype"] == "BF16"
    assert header["b.bias"]["dtype"] == "F8_E4M3"
    assert header["c.weight"]["dtype"] == "F64"  # BF16 cannot hold it: kept, not rounded
    assert header["n.table"]["dtype"] == "I64"
    assert header["__metadata__"]["ncdc.spec_sha256"] == "abc"
    declared = {"a/w.weight": "BF16", "b.bias": "F8_E4M3", "c.weight": "BF16"}
    assert json.loads(header["__metadata__"]["ncdc.storage"]) == declared
    back = load_params(p)
    for k, v in params.items():  # lossless round trip
        assert np.array_equal(back[k], v) and back[k].dtype.kind == v.dtype.kind
    assert {k: v for k, v in back.metadata.items() if k != "ncdc.storage"} == meta
    assert compare_metadata(back.metadata, meta) == []
    other = file_metadata("abc", {"k": "3"}, "emulate", "0.2.0")
    diff = compare_metadata(back.metadata, other)
    assert any("k=2 in the file, 3 now" in d for d in diff)
    assert any("quant: 'exact' in the file, 'emulate' now" in d for d in diff)
    # npz has no BF16/FP8 dtype: float32, exact for them
    q = tmp_path / "w.npz"
    save_params(params, q, storage, meta)
    back = load_params(q)
    assert back["a/w.weight"].dtype == np.float32 and back["c.weight"].dtype == np.float64
    assert all(np.array_equal(back[k].astype(params[k].dtype), params[k]) for k in params)
    assert json.loads(back.metadata["ncdc.storage"]) == declared
    assert METADATA_KEY not in back


def test_eval_writes_and_checks_weight_metadata(capsys, tmp_path):
    p = tmp_path / "p.safetensors"
    rc, _, _ = _run(capsys, "eval", TRANSFORMER, "--save-params", p)
    assert rc == 0
    rc, _, err = _run(capsys, "eval", TRANSFORMER, "--params", p)
    assert rc == 0 and "warning" not in err
    rc, _, err = _run(capsys, "eval", TRANSFORMER, "--params", p, "--quant", "emulate")
    assert rc == 0 and "quant: 'exact' in the file, 'emulate' now" in err
    rc, _, err = _run(capsys, "eval", TRANSFORMER, "--params", p, "--quant", "emulate",
                      "--strict")
    assert rc == 1 and _one_line_error(err) and "--strict" in err


def test_nan_and_extra_keys_warn_or_fail_under_strict(capsys, tmp_path):
    p = tmp_path / "p.npz"
    rc, _, _ = _run(capsys, "eval", TRANSFORMER, "--save-params", p)
    arrays = dict(load_params(p))
    key = min(arrays)
    arrays[key] = np.full_like(arrays[key], np.nan, dtype=np.float64)
    arrays["not/a/param.weight"] = np.zeros(2)
    q = tmp_path / "q.npz"
    np.savez(q, **arrays)
    rc, _, err = _run(capsys, "eval", TRANSFORMER, "--params", q)
    assert rc == 0
    assert "'not/a/param.weight'" in err and "NaN or infinite" in err
    assert "carries no ncdc metadata" in err
    rc, _, err = _run(capsys, "eval", TRANSFORMER, "--params", q, "--strict")
    assert rc == 1 and _one_line_error(err)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, in0=np.full((3, 2, 2), np.inf), in1=np.zeros((4, 2, 2)),
             in2=np.zeros((4, 2, 2)), stray=np.zeros(1))
    rc, _, err = _run(capsys, "eval", ATTENTION_CORE, *SIZES, "--inputs", inputs, "--strict")
    assert rc == 1 and _one_line_error(err)


def test_generated_loader_refuses_what_the_interpreter_refuses(transformer):
    import torch

    from ncdc import interpreter
    from ncdc.codegen import compile_torch, load_interpreter_params

    env = transformer.bind("tiny").env
    block = transformer.block("Embedding")
    params = dict(interpreter.init_params(block, env))
    key = next(iter(params))
    _, module = compile_torch(block, env=env)
    load_interpreter_params(module, params)  # the interpreter's own arrays load
    bad = dict(params)
    bad[key] = params[key] + 1j
    with pytest.raises(EvaluationError):
        interpreter.interpret(block, env, params=bad)
    with pytest.raises(TypeError, match="complex"):
        load_interpreter_params(module, bad)
    bad[key] = np.array(["x"] * params[key].size).reshape(params[key].shape)
    with pytest.raises((TypeError, ValueError, RuntimeError)):
        load_interpreter_params(module, bad)
    assert torch.is_tensor(next(iter(module.state_dict().values())))


def test_check_counts_a_module_that_raises_as_a_failure(monkeypatch, capsys):
    import ncdc.verify.check as check_mod

    def broken(g, module, inputs, tape, dtype, masks=None):
        raise RuntimeError("the generated forward raised")

    monkeypatch.setattr(check_mod, "run_generated", broken)
    rc, out, _ = _run(capsys, "check", ATTENTION_CORE, *SIZES, "--seeds", "1")
    assert rc == 1 and "generated module failed: RuntimeError" in out
    assert "0 of 2 agree" in out
