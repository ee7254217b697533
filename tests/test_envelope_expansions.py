"""Operator expansions (``auxiliary.expansions`` of a viewer export): loaded as documents of
their own, listed by ``ncdc show --expansions``, checked against the operator occurrence they
define by ``ncdc check --expansions``. Numbers are checked against numpy written here."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ncdc
from ncdc.cli import main
from ncdc.expansions import check_expansion, check_expansions, expansion_spec
from ncdc.ir.errors import SpecFormatError
from ncdc.spec.loader import load_expansion

from .conftest import DATA

SMALL = DATA / "external" / "mit-zardini-lab+tsncd__small.json"


def _variant(tmp_path, change) -> str:
    raw = json.loads(SMALL.read_text())
    change(raw["auxiliary"]["expansions"])
    path = tmp_path / "variant.json"
    path.write_text(json.dumps(raw))
    return str(path)


def test_expansions_evaluate_to_their_formulas():
    spec = ncdc.load(SMALL)
    x = np.random.default_rng(3).standard_normal((4, 4))
    softmax = ncdc.interpret(expansion_spec(spec, 3), preset="tiny")
    (got,) = softmax(x)
    np.testing.assert_allclose(got, np.exp(x) / np.exp(x).sum(axis=1, keepdims=True),
                               rtol=1e-13)
    rms = ncdc.interpret(expansion_spec(spec, 2), preset="tiny")
    v = x[0]
    (got,) = rms(v)
    np.testing.assert_allclose(got, v / np.sqrt((v * v).sum()), rtol=1e-13)


def test_check_reports_each_expansion_against_its_operator():
    results = {r.key: r for r in check_expansions(ncdc.load(SMALL))}
    assert results[3].status == "agrees" and results[3].max_rel < 1e-12
    assert results[3].path == "data.content[1]"
    # ncdc's RMSNorm divides by the root of the mean (and adds epsilon); the expansion, as
    # its description says, leaves the 1/n out: sqrt(4) times apart at the tiny size m = 4.
    r2 = results[2]
    assert r2.status == "differs" and r2.path.endswith("block.body.content[1]")
    factor = float(r2.reason.split("outputs are ")[1].split(" times")[0])
    assert 1.99 < factor <= 2.0
    assert "reciprocal of the axis size" in r2.reason


def test_a_wrong_expansion_differs_and_is_reported(tmp_path, capsys):
    def pi_for_e(exps):
        exps["3"]["expansion"] = exps["3"]["expansion"].replace('"EULER"', '"PI"')

    path = _variant(tmp_path, pi_for_e)
    r = check_expansion(ncdc.load(path), 3)
    assert r.status == "differs" and "times the expansion's" not in r.reason
    assert main(["check", "--expansions", path]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS" in out and "0 of 2 expansion(s) agree" in out


@pytest.mark.parametrize("change, phrase", [
    (lambda e: e.update({"9": e.pop("3")}), "no Broadcasted is numbered 9"),
    (lambda e: e.update({"1": e.pop("3")}), "occurrence 1 is a Linear, not a SoftMax"),
    (lambda e: e["3"].update(expansion='{"uid_repository": {}}'),
     "the expansion cannot be run"),
])
def test_expansions_that_cannot_be_run_side_by_side_are_skipped_with_a_reason(
        tmp_path, change, phrase):
    results = check_expansions(ncdc.load(_variant(tmp_path, change)))
    skipped = [r for r in results if r.status == "skipped"]
    assert len(skipped) == 1 and phrase in skipped[0].reason


def test_load_expansion_names_the_ones_there_are():
    with pytest.raises(SpecFormatError, match="has no expansion 7; its expansions: 2, 3"):
        load_expansion(ncdc.load(SMALL).doc, 7)
    sub = load_expansion(ncdc.load(SMALL).doc, 2)
    assert sub.source.endswith("(expansion 2: Normalize)")


def test_cli_show_and_check_expansions(capsys):
    assert main(["show", "--expansions", str(SMALL)]) == 0
    out = capsys.readouterr().out
    assert "expansion 3: SoftMax (SoftMax) at data.content[1]" in out
    assert "diagram: (R[x, m]) → (R[x, m])" in out
    assert main(["show", "--expansions", "--json", str(SMALL)]) == 0
    rows = json.loads(capsys.readouterr().out)["expansions"]
    assert [(r["key"], r["operator"], r["occurrence"]) for r in rows] == [
        (2, "Normalize", "data.content[0].operator.block.body.content[1]"),
        (3, "SoftMax", "data.content[1]")]
    assert main(["check", "--expansions", "--json", str(SMALL)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["checked"], doc["agree"], doc["differ"]) == (2, 1, 1)


def test_a_file_without_expansions_says_so(capsys):
    matmul = DATA / "external" / "mit-zardini-lab+tsncd__matmul.json"
    assert main(["check", "--expansions", str(matmul)]) == 0
    assert "writes out no operator expansions" in capsys.readouterr().out
