"""Fast hypothesis fuzzing of hostile sizes, names and flags (the long campaign is
``bench/fuzz.py``): every run ends in exit 0, 1 or 2 with at most a one-line error, never a
traceback, an ``internal-error`` diagnostic or a hang, and ``validate`` refuses exactly what
``eval`` refuses."""
from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ncdc.cli import main
from tests.conftest import ATTENTION_CORE

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])
DOC = json.loads(ATTENTION_CORE.read_text(encoding="utf-8"))
AXES = [k for k, v in DOC["uid_repository"].items() if v["__type__"] == "RawAxis"]
TAG = next(k for k, v in DOC["uid_repository"].items() if v["__type__"] == "BlockTag")
SIZES = ["--size", "k=2", "--size", "h=2", "--size", "q=3", "--size", "x=4"]


def _I(v):
    return {"__type__": "Integer", "_value": v}


ints = st.one_of(st.integers(-10, 10), st.sampled_from([2**31, 10**12, 2**63 - 1, 2**63,
                                                       2**70, -2**63]),
                 st.integers(-2**80, 2**80))
numerics = st.recursive(
    ints.map(_I) | st.sampled_from([{"__type__": "Constant", "symbol": s}
                                    for s in ("PI", "EULER", "INFINITY", "IMAGINARY_UNIT")]),
    lambda inner: st.one_of(
        st.builds(lambda b, e: {"__type__": "Power", "base": b, "exponent": e}, inner, inner),
        st.builds(lambda a: {"__type__": "SquareRoot", "argument": a}, inner),
        st.lists(inner, min_size=1, max_size=3).map(
            lambda c: {"__type__": "Multiplication", "content": c}),
        st.lists(inner, min_size=1, max_size=3).map(
            lambda c: {"__type__": "Addition", "content": c})),
    max_leaves=4)
names = st.one_of(st.sampled_from(["super", "range", "None", "F", "torch", "math", "\ud800",
                                   "\u03b1", "", "x" * 5000, "'\"\\", "\n", "a/b", "@0"]),
                  st.text(max_size=20))


def _run(capsys, argv):
    t0 = time.process_time()
    rc = main([str(a) for a in argv])
    took = time.process_time() - t0
    out, err = capsys.readouterr()
    assert rc in (0, 1, 2), (argv, rc)
    assert "Traceback" not in out + err and "internal-error" not in out + err, out + err
    assert len([ln for ln in err.splitlines() if ln.startswith("error")]) <= 1, err
    assert took < 5.0, (argv, took)
    return rc, out, err


def _write(tmp_path, doc, name="spec.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc), encoding="utf-8", errors="surrogatepass")
    return p


@pytest.mark.slow
@SETTINGS
@given(axis=st.sampled_from(AXES), size=numerics, rep=st.none() | numerics)
def test_hostile_numerics_are_refused_alike(capsys, tmp_path, axis, size, rep):
    doc = json.loads(json.dumps(DOC))
    doc["uid_repository"][axis]["_size"] = size
    if rep is not None:
        doc["uid_repository"][TAG]["repetition"] = rep
    p = _write(tmp_path, doc)
    rc_validate, out, _ = _run(capsys, ["validate", p, *SIZES])
    rc_eval, _, err = _run(capsys, ["eval", p, *SIZES])
    if rc_validate == 1:  # validate rejects: eval refuses, with validate's first error
        assert rc_eval in (1, 2) and err.startswith("error:")
        if "refused: " in err:
            code = err.split("refused: ", 1)[1].split(":", 1)[0]
            assert f"error: {code}:" in out
    elif rc_validate == 0:  # valid: eval either runs or refuses memory it has not got
        assert rc_eval == 0 or "available" in err or "memory" in err, err
    _run(capsys, ["show", p])
    _run(capsys, ["params", p])


@pytest.mark.slow
@SETTINGS
@given(title=names, label=names, code_form=st.none() | names)
def test_hostile_names_never_break_the_commands(capsys, tmp_path, title, label, code_form):
    doc = json.loads(json.dumps(DOC))
    doc["uid_repository"][TAG]["aesthetics"]["title"] = title
    sym = next(v for v in doc["uid_repository"].values() if v["__type__"] == "FreeNumeric")
    sym["uid"]["_name"]["body"] = label
    if code_form is not None:
        sym["uid"]["_name"]["code_form"] = code_form
    p = _write(tmp_path, doc)
    for cmd in ("validate", "blocks", "show", "params"):
        _run(capsys, [cmd, p])
    _run(capsys, ["eval", p, *SIZES])


flag_values = st.one_of(st.sampled_from(["nan", "inf", "-inf", "1e400", "-1", "2.5", "0",
                                         str(2**63), "9" * 5000, "", " ", "0x10", "1_000"]),
                        st.text(max_size=8))


@SETTINGS
@given(name=st.sampled_from(["k", "h", "q", "x", "zz", "id:1", ""]), value=flag_values,
       seed=st.sampled_from(["-1", "0", "3", str(2**64)]),
       constant=st.none() | flag_values)
def test_hostile_flags_are_one_line_usage_errors(capsys, name, value, seed, constant):
    argv = ["eval", ATTENTION_CORE, *SIZES, "--size", f"{name}={value}", "--seed", seed]
    if constant is not None:
        argv += ["--constant", f"k={constant}"]
    rc, _, err = _run(capsys, argv)
    if rc == 2:
        assert err.startswith("error:") and len(err.strip().splitlines()) == 1
