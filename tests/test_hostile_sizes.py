"""The size gate (issue 8, points 1 and 2): hostile sizes, repetitions and indices are refused
where they are bound, by ``validate`` and by ``eval``/``compile`` alike, in bounded time."""
from __future__ import annotations

import json
import math
import time

import pytest
import sympy

import ncdc
from ncdc.cli import main
from ncdc.ir.env import Env
from ncdc.ir.errors import BindingError, SpecDecodeError, SpecError, UsageError
from ncdc.ir.numeric import INT64_MAX, FreeNumeric, TooLarge, bounded
from ncdc.spec.loader import load_text
from ncdc.spec.validate import validate
from tests.conftest import ATTENTION_CORE, TRANSFORMER

SIZES = ["--size", "k=2", "--size", "h=2", "--size", "q=3", "--size", "x=4"]


def _I(v):
    return {"__type__": "Integer", "_value": v}


def _doc(path=ATTENTION_CORE):
    return json.loads(path.read_text(encoding="utf-8"))


def _first_axis(doc) -> str:
    return next(k for k, v in doc["uid_repository"].items() if v["__type__"] == "RawAxis")


def _with_size(size, path=ATTENTION_CORE) -> str:
    doc = _doc(path)
    doc["uid_repository"][_first_axis(doc)]["_size"] = size
    return json.dumps(doc)


def _write(tmp_path, text: str, name="spec.json"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


# --------------------------------------------------------------------------- bounded evaluation


def test_bounded_evaluation_refuses_huge_powers_quickly():
    d = FreeNumeric(1)
    t0 = time.process_time()
    with pytest.raises(TooLarge):
        bounded(2**d, {d: sympy.Integer(10**30)})
    with pytest.raises(TooLarge):
        bounded(sympy.Pow(3, 2**63, evaluate=False))
    with pytest.raises(BindingError, match="too large"):
        Env({d: 10**30}).size(2**d)
    assert time.process_time() - t0 < 1.0
    # small powers are exact
    assert bounded(2**d, {d: sympy.Integer(62)}) == 2**62
    assert Env({d: 62}).size(2**d + 1) == 2**62 + 1


def test_env_refuses_what_is_not_a_finite_int64_integer():
    d = FreeNumeric(1)
    for bad in (float("nan"), float("inf"), "3", None, 2**5000):
        with pytest.raises(BindingError):
            Env({d: bad})
    with pytest.raises(BindingError, match="outside int64"):
        Env({d: 2**63}).size(d)
    assert Env({d: INT64_MAX}).size(d) == INT64_MAX
    with pytest.raises(BindingError, match="not an integer"):
        Env({d: 2}).size(sympy.sqrt(d))
    assert Env({d: 4.0}).size(d) == 4


def test_decoding_a_huge_power_is_cheap_and_a_long_literal_is_typed():
    t0 = time.process_time()
    doc = load_text(_with_size({"__type__": "Power", "base": _I(3), "exponent": _I(2**63)}))
    assert time.process_time() - t0 < 2.0
    diags = [d for d in validate(doc) if d.code == "size-invalid"]
    assert diags and "too large" in diags[0].message
    with pytest.raises(SpecDecodeError, match="too large") as info:
        load_text(_with_size(_I(int("9" * 2000))))
    assert info.value.json_path.endswith("._size._value")
    # past Python's 4300-digit conversion limit: still a typed error, with its place
    text = _with_size("HUGE").replace('"HUGE"', '{"__type__": "Integer", "_value": '
                                      + "9" * 5000 + "}")
    with pytest.raises(SpecError, match="number cannot be converted"):
        load_text(text)


# --------------------------------------------------------------------------- validate == eval


@pytest.mark.parametrize("size, verdict", [
    (_I(-3), "below zero"),
    (_I(0), "an empty axis"),
    ({"__type__": "Constant", "symbol": "PI"}, "not an integer"),
    ({"__type__": "SquareRoot", "argument": _I(2)}, "not an integer"),
    (_I(2**70), "outside int64"),
    ({"__type__": "Power", "base": _I(2), "exponent": _I(10**30)}, "too large"),
])
def test_hostile_literal_sizes_are_refused_alike(capsys, tmp_path, size, verdict):
    path = _write(tmp_path, _with_size(size))
    rc, out, _ = _run(capsys, "validate", path)
    assert rc == 1 and "size-invalid" in out and verdict in out and "axis k" in out
    for cmd in ("eval", "compile"):
        rc, out, err = _run(capsys, cmd, path, *SIZES)
        assert rc == 1, (cmd, out, err)
        assert "refused: size-invalid" in err and verdict in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", [1, 10**12])
def test_small_and_large_sizes_within_int64_are_valid(capsys, tmp_path, value):
    rc, out, _ = _run(capsys, "validate", _write(tmp_path, _with_size(_I(value))))
    assert rc == 0 and "size-invalid" not in out


def test_arrays_beyond_int64_elements_are_refused(capsys, tmp_path):
    path = str(ATTENTION_CORE)
    # R[x, h, k] with x*h*k: 3 * 2**31 * 2**31 > 2**63 - 1 (computed here independently)
    sizes = {"x": 3, "h": 2**31, "k": 2**31, "q": 1}
    assert math.prod([sizes["x"], sizes["h"], sizes["k"]]) > INT64_MAX
    flags = [a for n, v in sizes.items() for a in ("--size", f"{n}={v}")]
    rc, out, _ = _run(capsys, "validate", path, *flags)
    assert rc == 1 and "R[x, h, k] would hold" in out and str(3 * 2**62) in out
    rc, _, err = _run(capsys, "eval", path, *flags)
    assert rc == 1 and "refused: size-invalid" in err
    # one fewer factor of two fits: valid
    sizes["k"] = 2**30
    flags = [a for n, v in sizes.items() for a in ("--size", f"{n}={v}")]
    assert math.prod([3, 2**31, 2**30]) <= INT64_MAX
    rc, out, _ = _run(capsys, "validate", path, *flags)
    assert "would hold" not in out


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-1", "2.5", str(2**63), "x"])
def test_hostile_size_flags_exit_2_in_one_line(capsys, value):
    rc, _, err = _run(capsys, "eval", str(ATTENTION_CORE), "--size", f"k={value}")
    assert rc == 2 and "--size" in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_size_flags_raise_usage_errors_through_the_api():
    spec = ncdc.load(ATTENTION_CORE)
    with pytest.raises(UsageError, match="whole number"):
        spec.bind("tiny", {"k": -1})
    with pytest.raises(UsageError, match="finite"):
        spec.bind("tiny", {"k": float("nan")})
    assert spec.bind("tiny", {"k": 4.0}).env.size(next(iter(
        s for s in spec.symbols.values() if s.label == "k"))) == 4


# --------------------------------------------------------------------------- repetitions


def _with_repetition(rep, path=ATTENTION_CORE) -> str:
    doc = _doc(path)
    for v in doc["uid_repository"].values():
        if v["__type__"] == "BlockTag":
            v["repetition"] = rep
    return json.dumps(doc)


def test_a_repetition_of_10_12_answers_symbolically_in_time(capsys, tmp_path):
    import torch  # noqa: F401 - imported once here, not timed as part of `compile`

    path = _write(tmp_path, _with_repetition(_I(10**12)))
    for argv in (["show", path], ["validate", path], ["graph", path, "-o",
                                                       str(tmp_path / "g.dot")],
                 ["params", path], ["eval", path, *SIZES], ["compile", path, *SIZES]):
        t0 = time.process_time()  # CPU time: the machine may be shared
        rc, out, err = _run(capsys, *argv)
        took = time.process_time() - t0
        assert took < 3.0, (argv[0], took)  # typically well under a second
        assert "Traceback" not in out + err
    rc, out, _ = _run(capsys, "show", path)
    assert rc == 0 and "×1000000000000" in out
    rc, out, _ = _run(capsys, "validate", path)
    assert rc == 1 and "repeats 1000000000000 times, beyond 65536" in out


def test_a_symbolic_repetition_bound_too_high_is_refused(capsys, tmp_path):
    doc = _doc(TRANSFORMER)
    tag = next(v for v in doc["uid_repository"].values() if v["__type__"] == "BlockTag"
               and v["repetition"].get("_value", 1) != 1)
    tag["repetition"] = {"__type__": "Power", "base": _I(2), "exponent": _I(40)}
    path = _write(tmp_path, json.dumps(doc))
    rc, out, _ = _run(capsys, "validate", path)
    assert rc == 1 and f"repeats {2**40} times" in out


# --------------------------------------------------------------------------- indices and ports


def _nodes(value):
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            yield v
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def test_a_negative_mapping_index_is_refused_by_validate_and_eval(capsys, tmp_path):
    doc = _doc()
    rx = next(v for v in _nodes(doc["data"]) if v.get("__type__") == "Rearrangement"
              and v.get("mapping") == [1, 0])
    rx["mapping"] = [-1, 0]
    path = _write(tmp_path, json.dumps(doc))
    rc, out, _ = _run(capsys, "validate", path)
    assert rc == 1 and "rearrangement-bounds" in out and "mapping[0] = -1" in out
    rc, _, err = _run(capsys, "eval", path, *SIZES)
    assert rc == 1 and "refused: rearrangement-bounds" in err


def test_a_linear_without_output_weaves_is_a_typed_refusal(capsys, tmp_path):
    doc = _doc(TRANSFORMER)
    lin = next(v for v in _nodes(doc) if v.get("__type__") == "Broadcasted"
               and isinstance(v.get("operator"), dict)
               and v["operator"].get("__type__") == "Linear")
    lin["output_weaves"] = []
    path = _write(tmp_path, json.dumps(doc))
    rc, out, _ = _run(capsys, "validate", path)
    assert rc == 1 and "internal-error" not in out
    for cmd in ("eval", "compile", "params"):
        rc, out, err = _run(capsys, cmd, path)
        assert rc == 1 and err.startswith("error:") and "Traceback" not in err, cmd


def test_param_roles_refuses_missing_weaves_with_a_spec_error(transformer):
    from ncdc.ir.morphisms import Broadcasted
    from ncdc.ir.operators import Linear
    from ncdc.ir.params import param_roles
    from ncdc.ir.walk import walk

    b = next(s.node for s in walk(transformer.data) if isinstance(s.node, Broadcasted)
             and isinstance(s.node.operator, Linear))
    import dataclasses

    broken = dataclasses.replace(b, output_weaves=())
    with pytest.raises(SpecError, match="needs an input and an output weave"):
        param_roles(broken)


def test_params_of_a_huge_repetition_are_listed_once_with_their_count(capsys, tmp_path):
    rc, out, _ = _run(capsys, "params", TRANSFORMER, "--preset", "tiny", "--json")
    rows = json.loads(out)["params"]
    layer = [r for r in rows if r["key"].startswith("Transformer Layer@")]
    per_layer = sum(r["elements"] for r in layer) // 6
    rest = sum(r["elements"] for r in rows) - 6 * per_layer
    assert {r["key"].split("/")[0] for r in layer} == {f"Transformer Layer@{i}"
                                                       for i in range(6)}
    doc = _doc(TRANSFORMER)
    for v in doc["uid_repository"].values():
        if v["__type__"] == "BlockTag" and v["repetition"].get("_value", 1) == 6:
            v["repetition"] = _I(10**12)
    path = _write(tmp_path, json.dumps(doc))
    t0 = time.process_time()
    rc, out, _ = _run(capsys, "params", path, "--preset", "tiny", "--json")
    assert rc == 0 and time.process_time() - t0 < 3.0
    got = json.loads(out)
    keys = [r["key"] for r in got["params"] if r["key"].startswith("Transformer Layer")]
    assert keys and all(k.startswith("Transformer Layer@i/") for k in keys)
    assert all(r.get("count") == 10**12 for r in got["params"]  # numbers as numbers (docs/json.md)
               if r["key"] in keys)
    assert got["totals"]["learned"]["elements"] == per_layer * 10**12 + rest


@pytest.mark.parametrize("wrap", [
    lambda h: {"__type__": "Addition", "content": [h, h, _I(1)]},
    lambda h: {"__type__": "Multiplication", "content": [h, h]},
    lambda h: {"__type__": "SquareRoot", "argument": h},
    lambda h: {"__type__": "Power", "base": h, "exponent": _I(2)},
    lambda h: {"__type__": "LargerOf", "first": h, "second": _I(3)},
    lambda h: {"__type__": "Logarithm", "base": _I(2), "argument": h},
])
def test_huge_numbers_inside_other_numerics_never_expand(capsys, tmp_path, wrap):
    huge = {"__type__": "Power", "base": _I(10), "exponent": _I(10**30)}
    path = _write(tmp_path, _with_repetition(wrap(huge)))
    t0 = time.process_time()
    rc, out, _ = _run(capsys, "validate", path)
    assert time.process_time() - t0 < 3.0
    assert rc == 1 and "too large" in out
