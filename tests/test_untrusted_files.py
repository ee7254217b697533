"""Hostile checkpoint maps and weight files (issue 24 point 3): each ends in one typed error
(a MapError, CheckpointError or EvaluationError naming the file and the entry) within a time
bound, and the deflate bomb within a memory bound; run and eval share one dtype gate; run has
--strict and its --save-params files carry the metadata eval --strict checks."""
from __future__ import annotations

import json
import struct
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

from ncdc.checkpoint.errors import CheckpointError, MapError
from ncdc.checkpoint.files import Shard, header_of
from ncdc.checkpoint.mapped import MappedSource
from ncdc.checkpoint.mapping import load_map, parse_map
from ncdc.checkpoint.transforms import dequantize
from ncdc.interpreter.weights import load_params, read_npz, read_safetensors
from ncdc.ir.errors import EvaluationError, SpecError
from tests.conftest import TRANSFORMER
from tests.lazy import torch
from tests.test_hostile_files import _one_line_error, _run

FAST = 2.0  # seconds: every hostile case ends within this


class Timed:
    """``with Timed():`` fails the test when the block takes longer than FAST seconds."""

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        took = time.perf_counter() - self.t0
        assert took < FAST, f"took {took:.2f} s"
        return False


def _map(**extra):
    doc = {"rules": [{"tensor": r"x\.(?P<e>\d+)\.w", "key": "K.weight",
                      "stack": {"index": "e", "axis": 0}}]}
    doc.update(extra)
    return doc


# --------------------------------------------------------------------------- map regexes

@pytest.mark.parametrize("pattern, needle", [
    (r"ffn\.(a+)+b", "nested quantifiers"),
    (r"(a*b)*c", "nested quantifiers"),
    (r"(a|aa)+b", "alternation inside a repeated group"),
    ("a{4294967296}", "repetition number is too large"),
    ("a{2000}", "repetition count above 1000"),
    (".*.*.*.*x", "more than 3 repetitions"),
    ("(" * 300 + ")" * 300, "nested more than 20 deep"),
    ("x" * 5000, "longer than 1000 characters"),
    ("(", "not a valid regex"),
])
def test_unsafe_map_regexes_are_refused_when_the_map_loads(pattern, needle):
    for doc in (_map(ignore=[pattern]),
                {"rules": [{"tensor": pattern, "key": "K.weight"}]}):
        with Timed(), pytest.raises(MapError) as info:
            parse_map(doc, "m.json")
        msg = str(info.value)
        assert needle in msg and "m.json" in msg and "\n" not in msg
        assert ("ignore[0]" in msg) or ("rule 1" in msg)


def test_nested_quantifier_against_a_long_name_would_hang_unchecked():
    """The refused pattern is the one that backtracks: plain ``re`` on a 24-character name
    already takes measurably long (exponential), so the check is what bounds it."""
    import re

    pattern = re.compile(r"ffn\.(a+)+b")

    def best(n):  # the least of three runs: a pause of the machine lengthens one, not all
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            pattern.fullmatch("ffn." + "a" * n)
            times.append(time.perf_counter() - t0)
        return min(times)

    slow, fast = best(20), best(10)
    assert slow > 50 * fast  # 2^10 more steps


def test_safe_patterns_still_load():
    cmap = load_map("examples/checkpoint_maps/deepseek_v3_layer0.toml")
    assert cmap.rules and cmap.ignore
    ok = parse_map(_map(ignore=[r"model\.layers\.([1-9]|[1-9][0-9]+)\..*", r"(?:a\.)?b+",
                                r"lm_head\.weight", r"x{3,5}"]))
    assert len(ok.ignore) == 4


class FakeFiles:
    path = "ckpt"

    def __init__(self, names):
        self._names = names
        self.metadata = {}

    def names(self):
        return list(self._names)


@pytest.mark.parametrize("tensor, name, needle", [
    (r"x\.(?P<e>\w+)\.w", "x.abc.w", "not a whole number of at most 9 digits"),
    (r"x\.(?P<e>\d+)\.w", "x.1234567890.w", "not a whole number of at most 9 digits"),
    (r"x\.(?P<e>\d+)\.w", "x." + "9" * 5000 + ".w", "characters long"),
    (r"x\.(?P<e>[٠-٩]+)\.w", "x.٣.w", "not a whole number"),
    (r"x(\.(?P<e>\d+))?\.w", "x.w", "did not take part in the match"),
])
def test_stack_captures_are_validated(tensor, name, needle):
    cmap = parse_map({"rules": [{"tensor": tensor, "key": "K.weight",
                                 "stack": {"index": "e", "axis": 0}}]})
    with Timed(), pytest.raises(CheckpointError, match=needle):
        MappedSource(FakeFiles([name]), cmap)


def test_key_captures_that_did_not_match_are_typed():
    cmap = parse_map({"rules": [{"tensor": r"x(\.(?P<n>\w+))?", "key": "K/${n}.weight"}]})
    with pytest.raises(CheckpointError, match="capture 'n' did not take part"):
        MappedSource(FakeFiles(["x"]), cmap)
    ok = MappedSource(FakeFiles(["x.a"]), cmap)
    assert ok.names() == ["K/a.weight"]


def test_ignore_is_bounded_by_the_name_length():
    cmap = parse_map(_map(ignore=[r"y\..*"]))
    with Timed(), pytest.raises(CheckpointError, match="at most 256"):
        MappedSource(FakeFiles(["y." + "a" * 300]), cmap)


@pytest.mark.parametrize("doc, needle", [
    ({"rules": [{"tensor": "x", "key": "k"}] * 10_001}, "more than 10000 rules"),
    (_map(ignore=["x"] * 10_001), "more than 10000 rules or ignore"),
    (_map(ignore=5), "'ignore' must be a list"),
    ({"rules": [{"tensor": "x", "split": {"keys": ["a", "b"], "sizes": [-1, 3]}}]},
     "must not be negative"),
    (_map(dequantize={"block": [2 ** 62, 1]}), "from 1 to 2147483648"),
    (_map(dequantize={"block": [0, 1]}), "from 1 to 2147483648"),
])
def test_transform_parameters_are_bounded(doc, needle):
    with Timed(), pytest.raises(MapError, match=needle):
        parse_map(doc, "m.toml")


def test_a_block_larger_than_the_tensor_dequantizes_as_one_block():

    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    scale = np.array([[0.5]], np.float32)
    with Timed():
        out = dequantize(torch.from_numpy(w), torch.from_numpy(scale), (2 ** 31, 2 ** 31),
                         torch.float64, "w")
    assert np.array_equal(out.numpy(), w.astype(np.float64) * 0.5)


@pytest.mark.parametrize("suffix, text", [
    (".json", "[" * 100_000 + "]" * 100_000),
    (".json", '{"rules": ' + "[" * 50 + "]" * 50 + "}"),
    (".toml", "rules = " + "[" * 100_000 + "]" * 100_000),
    (".toml", "description = 'x'\n" + "".join(f"[{'a.' * i}a]\n" for i in range(1))
     + "a = " + "{b = " * 40 + "1" + "}" * 40),
])
def test_deeply_nested_maps_are_typed(tmp_path, suffix, text):
    p = tmp_path / f"m{suffix}"
    p.write_text(text)
    with Timed(), pytest.raises(MapError) as info:
        load_map(p)
    assert str(p) in str(info.value)


# --------------------------------------------------------------------------- safetensors

def _safetensors(path, header: dict | str, data: bytes = b""):
    raw = (header if isinstance(header, str) else json.dumps(header)).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def _both_readers(path):
    """Both safetensors readers (the interpreter's and the lazy checkpoint one) refuse typed."""
    with Timed(), pytest.raises(EvaluationError) as a:
        read_safetensors(path)
    with Timed(), pytest.raises(CheckpointError) as b:
        Shard(path)
    return str(a.value), str(b.value)


def test_overlapping_safetensors_offsets_are_refused(tmp_path):
    hdr = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}
    p = _safetensors(tmp_path / "o.safetensors", hdr, bytes(12))
    for msg in _both_readers(p):
        assert "overlap" in msg and "'a'" in msg
    hdr["b"]["data_offsets"] = [8, 16]
    q = _safetensors(tmp_path / "ok.safetensors", hdr, bytes(16))
    assert set(read_safetensors(q)) == {"a", "b"}


@pytest.mark.parametrize("header", [
    '{"a": {"dtype": "F32", "shape": ' + "[" * 100_000 + "]" * 100_000 + "}}",
    '{"a": {"dtype": "F32", "shape": [[[[[1]]]]], "data_offsets": [0, 4]}}',
    '{"__metadata__": {"k": ' + "[" * 20 + "]" * 20 + "}}",
    '{"__metadata__": ' + "{\"a\": " * 5000 + "1" + "}" * 5000 + "}",
])
def test_nested_safetensors_headers_are_typed(tmp_path, header):
    p = _safetensors(tmp_path / "n.safetensors", header, bytes(4))
    _both_readers(p)


def test_nested_index_json_is_typed(tmp_path):
    p = tmp_path / "model.safetensors.index.json"
    p.write_text('{"weight_map": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with Timed(), pytest.raises(CheckpointError, match="nested"):
        header_of(p)


# --------------------------------------------------------------------------- npz

def _npz_member(zf, name, header: dict, payload: bytes, compress=zipfile.ZIP_STORED):
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    zf.writestr(zipfile.ZipInfo(name), buf.getvalue() + payload, compress_type=compress)


def test_nested_npz_metadata_is_typed(tmp_path):
    p = tmp_path / "m.npz"
    np.savez(p, w=np.zeros(2), __ncdc_metadata__=np.array("[" * 100_000 + "]" * 100_000))
    with Timed(), pytest.raises(EvaluationError, match="__ncdc_metadata__"):
        read_npz(p)
    np.savez(p, w=np.zeros(2), __ncdc_metadata__=np.array('{"a": {"b": [1]}}'))
    with pytest.raises(EvaluationError, match="object of strings"):
        read_npz(p)


@pytest.mark.parametrize("dtype", ["S4", "U2", "M8[s]", "m8[s]", "V8",
                                   [("a", "<f4"), ("b", "<i4")]])
def test_non_numeric_dtypes_are_refused_by_the_one_gate(tmp_path, dtype):
    p = tmp_path / "d.npz"
    dt = np.dtype(dtype)
    np.savez(p, w=np.zeros(3, dt))
    with Timed(), pytest.raises(EvaluationError, match="not a numeric array"):
        read_npz(p)


def test_big_endian_arrays_are_read_in_native_order(tmp_path):
    p = tmp_path / "be.npz"
    a = np.arange(6, dtype=">f8").reshape(2, 3)
    np.savez(p, w=a, i=np.arange(3, dtype=">i4"))
    got = read_npz(p)
    assert got["w"].dtype == np.float64 and got["w"].dtype.isnative
    assert np.array_equal(got["w"], np.arange(6.0).reshape(2, 3))
    assert got["i"].dtype.isnative and got["i"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("dtype", ["S4", "M8[s]", "U2"])
def test_run_and_eval_refuse_non_numeric_weights_alike(tmp_path, capsys, dtype):
    p = tmp_path / "e.npz"
    rc, _, _ = _run(capsys, "eval", TRANSFORMER, "--save-params", p)
    arrays = dict(load_params(p))
    key = min(arrays)
    arrays[key] = np.zeros(arrays[key].shape, np.dtype(dtype))
    q = tmp_path / "q.npz"
    np.savez(q, **arrays)
    for cmd in ("eval", "run"):
        rc, _, err = _run(capsys, cmd, TRANSFORMER, "--params", q)
        assert rc == 1 and _one_line_error(err) and "not a numeric array" in err, (cmd, err)


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_many_npz_members_read_in_linear_time(tmp_path):
    p = tmp_path / "many.npz"
    with zipfile.ZipFile(p, "w") as zf:
        for i in range(20_000):
            _npz_member(zf, f"k{i}.npy", {"descr": "<f4", "fortran_order": False,
                                          "shape": (1,)}, bytes(4))
    t0 = time.process_time()  # CPU time: other processes' load does not count
    got = read_npz(p)
    assert len(got) == 20_000
    assert time.process_time() - t0 < 3 * FAST
    with zipfile.ZipFile(p, "a") as zf:
        _npz_member(zf, "k7.npy", {"descr": "<f4", "fortran_order": False, "shape": (1,)},
                    bytes(4))
    with Timed(), pytest.raises(EvaluationError, match="'k7': the key occurs twice"):
        read_npz(p)


def test_a_deflate_bomb_is_refused_before_inflating(tmp_path):
    """128 MiB of zeros deflate to ~130 kB; the member is refused from its declared sizes,
    with under 16 MiB allocated (numpy reports its buffers to tracemalloc)."""
    p = tmp_path / "bomb.npz"
    n = 128 << 20
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        import io

        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, {"descr": "|u1", "fortran_order": False,
                                                    "shape": (n,)})
        with zf.open("w.npy", "w", force_zip64=True) as fh:
            fh.write(head.getvalue())
            chunk = bytes(1 << 20)
            for _ in range(n >> 20):
                fh.write(chunk)
    assert p.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with Timed(), pytest.raises(EvaluationError, match="inflates .* save such arrays"):
            read_npz(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_a_member_whose_bytes_lie_about_its_shape_is_refused(tmp_path):
    p = tmp_path / "lie.npz"
    with zipfile.ZipFile(p, "w") as zf:
        _npz_member(zf, "w.npy", {"descr": "<f8", "fortran_order": False,
                                  "shape": (10 ** 9,)}, bytes(8))
    with Timed(), pytest.raises(EvaluationError, match="declares shape"):
        read_npz(p)


# --------------------------------------------------------------------------- run --strict

def test_run_save_params_carries_the_metadata_eval_strict_checks(tmp_path, capsys):
    p = tmp_path / "r.npz"
    rc, _, err = _run(capsys, "run", TRANSFORMER, "--params", "synthetic", "--save-params", p)
    assert rc == 0, err
    meta = load_params(p).metadata
    assert {"ncdc.spec_sha256", "ncdc.binding", "ncdc.quant", "ncdc.version"} <= set(meta)
    rc, _, err = _run(capsys, "eval", TRANSFORMER, "--params", p, "--strict")
    assert rc == 0, err
    rc, _, err = _run(capsys, "run", TRANSFORMER, "--params", p, "--strict")
    assert rc == 0, err
    rc, _, err = _run(capsys, "run", TRANSFORMER, "--params", p, "--strict",
                      "--quant", "emulate")
    assert rc == 1 and _one_line_error(err) and "--strict" in err and "quant" in err


def test_run_strict_refuses_extra_keys_and_missing_metadata(tmp_path, capsys):
    p = tmp_path / "r.npz"
    _run(capsys, "run", TRANSFORMER, "--params", "synthetic", "--save-params", p)
    arrays = dict(load_params(p))
    q = tmp_path / "q.npz"
    np.savez(q, **arrays)  # no metadata
    rc, _, err = _run(capsys, "run", TRANSFORMER, "--params", q)
    assert rc == 0, err
    rc, _, err = _run(capsys, "run", TRANSFORMER, "--params", q, "--strict")
    assert rc == 1 and _one_line_error(err) and "no ncdc metadata" in err
    arrays["not/a/param.weight"] = np.zeros(2)
    from ncdc.interpreter.weights import save_params

    save_params(arrays, q, metadata=load_params(p).metadata)
    rc, _, err = _run(capsys, "run", TRANSFORMER, "--params", q, "--strict")
    assert rc == 1 and _one_line_error(err) and "'not/a/param.weight'" in err


def test_every_hostile_error_is_a_spec_error():
    """The typed errors used above are the project's SpecError family (exit 1 or 2)."""
    assert issubclass(MapError, SpecError) and issubclass(CheckpointError, SpecError)


def test_run_and_eval_accept_big_endian_weights_alike(tmp_path, capsys):
    p = tmp_path / "e.npz"
    _run(capsys, "eval", TRANSFORMER, "--save-params", p)
    arrays = {k: v.astype(v.dtype.newbyteorder(">")) for k, v in load_params(p).items()}
    q = tmp_path / "be.npz"
    np.savez(q, **arrays)
    outs = {}
    for cmd in ("eval", "run"):
        rc, out, err = _run(capsys, cmd, TRANSFORMER, "--params", q, "--json")
        assert rc == 0, (cmd, err)
        outs[cmd] = json.loads(out)
    rc, out, _ = _run(capsys, "eval", TRANSFORMER, "--params", p, "--json")
    assert json.loads(out)["outputs"] == outs["eval"]["outputs"]
