"""One gate for every entry point: ``ncdc.interpret`` and ``ncdc.compile_torch`` refuse what
``ncdc validate`` reports as an error (the command line's gate), with the same typed error and
the same first reason as ``ncdc eval`` / ``ncdc compile``, and run the memory estimate;
``unsafe_skip_checks=True`` skips both."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ncdc
from ncdc.cli import main
from ncdc.ir.errors import SpecError
from ncdc.preflight import MemoryBudgetError
from tests.conftest import ATTENTION_CORE, TRANSFORMER, find_typed

SIZES = {"x": 3, "h": 2, "k": 2, "q": 1}
TILED = {"__registered__": "enum", "type": "WeaveMode", "name": "TILED"}


def _doc():
    return json.loads(ATTENTION_CORE.read_text(encoding="utf-8"))


def _repetition(value):
    doc = _doc()
    tag = next(v for v in doc["uid_repository"].values() if v["__type__"] == "BlockTag")
    tag["repetition"] = {"__type__": "Integer", "_value": value}
    return doc


def _softmax_widened():
    """The SoftMax of the attention core mapping ``[k]`` to ``[k, k]``."""
    doc = _doc()
    _, sm = find_typed(doc, "Broadcasted")[1]
    assert sm["operator"]["__type__"] == "SoftMax"
    out = sm["output_weaves"][0]["_shape"]
    out.append(dict(out[-1]))
    return doc


def _rearrangement_out_of_range():
    doc = _doc()
    rearr = doc["data"]["body"]["content"][0]["content"][1]
    assert rearr["__type__"] == "Rearrangement"
    rearr["mapping"] = [5]
    return doc


def _surrogate_title():
    doc = _doc()
    tag = next(v for v in doc["uid_repository"].values() if v["__type__"] == "BlockTag")
    tag["aesthetics"]["title"] = "Attention \ud800 Core"
    return doc


def _surrogate_axis_name():
    doc = _doc()
    axis = next(v for v in doc["uid_repository"].values() if v["__type__"] == "RawAxis")
    axis["uid"]["_name"]["body"] = "k\udfff"
    return doc


def _zero_axis():
    doc = _doc()
    axis = next(v for v in doc["uid_repository"].values() if v["__type__"] == "RawAxis")
    axis["_size"] = {"__type__": "Integer", "_value": 0}
    return doc


HOSTILE = {
    "repetition 0": (_repetition(0), "block-repetition"),
    "repetition -1": (_repetition(-1), "block-repetition"),
    "softmax [k] -> [k, k]": (_softmax_widened(), None),
    "rearrangement out of range": (_rearrangement_out_of_range(), "rearrangement-bounds"),
    "surrogate in a title": (_surrogate_title(), "name-invalid"),
    "surrogate in an axis name": (_surrogate_axis_name(), "name-invalid"),
    "zero-size axis": (_zero_axis(), "size-invalid"),
}


def _write(tmp_path, doc) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def _cli_refusal(capsys, cmd, path) -> str:
    flags = [a for n, v in SIZES.items() for a in ("--size", f"{n}={v}")]
    rc = main([cmd, path, *flags])
    out, err = capsys.readouterr()
    assert rc == 1, (out, err)
    assert err.startswith("error: refused: "), err
    return err.strip()


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("api", ["interpret", "compile_torch"])
def test_the_api_refuses_what_the_cli_refuses(capsys, tmp_path, case, api):
    doc, code = HOSTILE[case]
    path = _write(tmp_path, doc)
    cli = _cli_refusal(capsys, "eval" if api == "interpret" else "compile", path)
    spec = ncdc.load(path)
    with pytest.raises(SpecError) as e:
        getattr(ncdc, api)(spec, sizes=SIZES)
    msg = e.value.message
    assert msg.startswith("refused: ")
    if code is not None:
        assert msg.startswith(f"refused: {code}: ")
    assert msg.split(" (and ")[0] in cli


@pytest.mark.parametrize("api", ["interpret", "compile_torch"])
def test_a_width_of_1e12_is_refused_by_the_memory_estimate(api):
    spec = ncdc.load(TRANSFORMER)
    with pytest.raises(MemoryBudgetError) as e:
        getattr(ncdc, api)(spec, sizes={"m": 10**12})
    assert isinstance(e.value, SpecError)
    assert e.value.message.startswith(f"{api} would need about ")
    assert "nothing was allocated" in e.value.message


def test_the_estimate_of_compile_torch_counts_the_dtype_and_max_memory_applies():
    spec = ncdc.load(TRANSFORMER)
    sizes = {"m": 64, "d_{ff}": 256}
    # the float64 module's parameters alone: m*d_ff twice (two Linear maps), 8 bytes each
    assert 2 * 64 * 256 * 8 > 2**10
    for api in ("interpret", "compile_torch"):
        with pytest.raises(MemoryBudgetError, match="the limit is --max-memory 1 KiB"):
            getattr(ncdc, api)(spec, sizes=sizes, max_memory="1KiB")
    msgs = {}
    for dtype in ("float64", "float32"):
        with pytest.raises(MemoryBudgetError) as e:
            ncdc.compile_torch(spec, sizes=sizes, dtype=dtype, max_memory=1024)
        msgs[dtype] = e.value.message
    assert msgs["float64"] != msgs["float32"]


def test_unsafe_skip_checks_skips_validation_and_the_estimate(tmp_path):
    spec = ncdc.load(_write(tmp_path, _softmax_widened()))
    with pytest.raises(SpecError):
        ncdc.interpret(spec, sizes=SIZES)
    run = ncdc.interpret(spec, sizes=SIZES, unsafe_skip_checks=True)
    assert run is not None
    valid = ncdc.load(ATTENTION_CORE)
    run = ncdc.interpret(valid, sizes=SIZES, max_memory="1KiB", unsafe_skip_checks=True)
    outs = run(*[np.ones(s) for s in run.dom_shapes()])
    assert outs[0].shape == tuple(run.cod_shapes()[0])
    _, module = ncdc.compile_torch(valid, sizes=SIZES, max_memory=1, unsafe_skip_checks=True)
    assert module is not None


def test_the_size_gate_runs_even_when_checks_are_skipped(tmp_path):
    doc = _doc()
    axis = next(v for v in doc["uid_repository"].values() if v["__type__"] == "RawAxis")
    axis["_size"] = {"__type__": "Integer", "_value": 2**70}
    spec = ncdc.load(_write(tmp_path, doc))
    with pytest.raises(SpecError, match="refused: size-invalid: .*outside int64"):
        ncdc.interpret(spec, sizes=SIZES, unsafe_skip_checks=True)


def test_a_block_is_validated_as_it_runs(tmp_path):
    """A block with a problem of its own is refused, given by name or as a node; a valid block
    of a spec with a problem elsewhere runs (its spec is refused as a whole)."""
    spec = ncdc.load(_write(tmp_path, _rearrangement_out_of_range()))
    block = spec.block("Attention Core")
    for call in (lambda: ncdc.interpret(block, sizes=SIZES),
                 lambda: ncdc.interpret("Attention Core", spec=spec, sizes=SIZES)):
        with pytest.raises(SpecError, match="refused: rearrangement-bounds"):
            call()
    doc = _doc()
    _, sm = find_typed(doc, "Broadcasted")[1]
    inner = doc["data"]["body"]["content"][0]["content"][0]
    assert inner["content"][1] is sm                        # the SoftMax's composition
    doc["data"]["body"]["content"][0]["content"][1]["mapping"] = [5]   # a problem beside it
    spec = ncdc.load(_write(tmp_path, doc))
    with pytest.raises(SpecError, match="refused: rearrangement-bounds"):
        ncdc.interpret(spec, sizes=SIZES)
    run = ncdc.interpret(spec.data.body.content[0].content[0], env=spec.bind("tiny", SIZES).env)
    assert run is not None


@pytest.mark.parametrize("cmd", ["validate", "eval", "compile", "check", "run"])
def test_an_empty_axis_is_refused_by_every_command(capsys, tmp_path, cmd):
    """Zero-size axes are refused by ``validate`` (``size-invalid``), so no backend meets an
    array without elements (``run --params synthetic`` once divided by zero initialising one)."""
    path = _write(tmp_path, _zero_axis())
    extra = ["--params", "synthetic"] if cmd == "run" else []
    rc = main([cmd, path, *extra])
    out, err = capsys.readouterr()
    assert rc == 1, (out, err)
    text = out if cmd == "validate" else err
    assert "size-invalid" in text and "an empty axis" in text
    assert "Traceback" not in err
