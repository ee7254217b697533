"""Literal constants the backends cannot represent are refused by validation
(``constant-invalid``, :mod:`spec.checks_constants`), so ``run`` (the generated module) and
``eval`` (the interpreter) never meet them: an Iverson literal outside int64 (torch compares
int64 indices with it), a formula ordering a complex value (``Max(i, x)``), a formula constant
beyond float64. The campaign's cases 4873 and 6656 of ``bench/fuzz.py``."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import ncdc
from ncdc.cli import main
from ncdc.spec.checks_constants import formula_problem
from ncdc.spec.loader import load_text

DATA = Path(__file__).parent / "data"


def _I(v):
    return {"__type__": "Integer", "_value": v}


def _codes(doc) -> list[str]:
    spec = ncdc.Spec(load_text(json.dumps(doc), "<test>"))
    return [d.code for d in spec.validate() if d.severity == "error"]


def _iverson_doc(value):
    doc = json.loads((DATA / "tensorlogic_program.json").read_text(encoding="utf-8"))
    eq = copy.deepcopy(doc)
    rhs = eq["data"]["content"][0]["operator"]["rhs"][2]["operand"]["rhs"]
    assert rhs["__type__"] == "IversonConst"
    rhs["value"] = value
    return eq


@pytest.mark.parametrize("value, bad", [(_I(2**63 - 1), False), (_I(-(2**63 - 1)), False),
                                        (_I(2**63), True), (_I(-(2**63)), True),
                                        ({"__type__": "Power", "base": _I(-2),
                                          "exponent": _I(64)}, True)])
def test_an_iverson_literal_outside_int64_is_refused(value, bad):
    assert ("constant-invalid" in _codes(_iverson_doc(value))) is bad


def _formula_doc(formula):
    doc = json.loads((DATA / "extra_kinds.json").read_text(encoding="utf-8"))
    op = doc["data"]["body"]["content"][1]["body"]["content"][6]["operator"]
    assert op["__type__"] == "Arithmetic"
    op["formula"] = formula
    return doc


_IMAG = {"__type__": "Constant", "symbol": "IMAGINARY_UNIT"}
_X = {"__type__": "FreeInput"}


@pytest.mark.parametrize("formula, bad", [
    ({"__type__": "LargerOf", "first": _IMAG, "second": _X}, True),
    ({"__type__": "LargerOf", "first": _I(3), "second": _X}, False),
    ({"__type__": "Addition", "content": [_I(10**400), _X]}, True),
    ({"__type__": "Addition", "content": [_I(10**300), _X]}, False),
])
def test_a_formula_constant_the_backends_cannot_compute_is_refused(formula, bad):
    assert ("constant-invalid" in _codes(_formula_doc(formula))) is bad


def test_complex_formulas_stay_valid():
    import sympy

    x = sympy.Symbol("x_in")
    assert formula_problem(sympy.exp(sympy.I * x)) is None  # yarn_rotary_expansion's e^{ix}
    assert formula_problem(sympy.Max(2 * sympy.I * x, 1)) is not None
    assert formula_problem(sympy.Integer(2) ** 10**6 + x) is not None  # too large, bounded
    spec = ncdc.load(DATA / "full_export" / "yarn_rotary_expansion.json")
    assert not [d for d in spec.validate() if d.code == "constant-invalid"]


def test_run_refuses_them_typed(tmp_path, capsys):
    doc = _iverson_doc({"__type__": "Power", "base": _I(-2), "exponent": _I(64)})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert main(["run", str(path), "--params", "synthetic"]) == 1
    err = capsys.readouterr().err
    assert "constant-invalid" in err and "Traceback" not in err
