"""Validation of mutated specs (the campaign's mutations, ``bench/fuzz.py``): loading raises
nothing but a ``SpecError``, validation raises nothing at all, under no binding and under
hostile ones, and every diagnostic carries a code of the documented table (there is no
catch-all ``internal-error`` code)."""
from __future__ import annotations

import json
import random
import re
import sys

import pytest

import ncdc
from bench import fuzz
from ncdc.ir.errors import SpecError
from ncdc.spec import validate as validate_module
from ncdc.spec.loader import load_text

CASES = 400
SIZES = [1, 2, 3, 0, -1, 2**31, 10**12, 2**63]


def _documented_codes() -> set[str]:
    table = validate_module.__doc__.split("=====\n", 2)[2]
    return set(re.findall(r"^``([a-z-]+)``", table, re.M)) | set(
        re.findall(r"^``[a-z-]+``, ``([a-z-]+)``", table, re.M))


def test_the_table_of_codes_has_no_catch_all():
    codes = _documented_codes()
    assert {"size-invalid", "name-invalid", "type-error", "too-deep"} <= codes
    assert "internal-error" not in codes


@pytest.fixture(scope="module")
def docs():
    return {p: json.loads(p.read_text(encoding="utf-8")) for p in fuzz.SPECS}


def _case(n: int, docs: dict):
    rng = random.Random(n)
    doc, how = fuzz.mutate(docs[rng.choice(fuzz.SPECS)], rng)
    if rng.random() < 0.3:
        doc, more = fuzz.mutate(doc, rng)
        how += "; " + more
    return rng, fuzz._text(doc, rng), how


def test_mutated_specs_validate_without_raising(docs):
    codes = _documented_codes()
    limit = sys.get_int_max_str_digits()
    seen: dict[str, int] = {}
    try:
        for n in range(CASES):
            rng, text, how = _case(n, docs)
            try:
                spec = ncdc.Spec(load_text(text, "<fuzz>", salvage=rng.random() < 0.3))
            except SpecError:
                continue
            diags = spec.validate()
            labels = [s.label for s in spec.symbols.values()]
            try:
                sizes = {rng.choice(labels): rng.choice(SIZES)} if labels else {}
                diags += spec.validate(spec.bind("tiny", sizes))
            except SpecError:
                pass                        # a refused binding is typed
            for d in diags:
                assert d.code in codes, (n, how, d)
                seen[d.code] = seen.get(d.code, 0) + 1
    finally:
        sys.set_int_max_str_digits(limit)   # the campaign's text writer lifts the limit
    assert "internal-error" not in seen
    assert len(seen) >= 5, seen             # the corpus reaches many checks


SCAN_EX4 = fuzz.ROOT / "tests" / "data" / "scan_ex4.json"


def _scan_doc():
    doc = json.loads(SCAN_EX4.read_text(encoding="utf-8"))
    assert doc["data"]["content"][1]["__type__"] == "Scan"
    return doc


def test_a_huge_scan_step_count_is_refused_when_decoded():
    """Found by the corpus: ``N = 10**(10**30)`` made the Scan's history axis (``N + 1``
    positions) expand the power without bound."""
    import time

    doc = _scan_doc()
    doc["data"]["content"][1]["N"] = {"__type__": "Power",
                                      "base": {"__type__": "Integer", "_value": 10},
                                      "exponent": {"__type__": "Integer", "_value": 10**30}}
    t0 = time.process_time()
    with pytest.raises(SpecError, match="the step count N is too large"):
        load_text(json.dumps(doc), "<test>")
    assert time.process_time() - t0 < 2.0


def test_a_scan_whose_base_gives_nothing_is_reported_not_raised():
    """Found by the corpus: an operator without results inside a Scan's base left the tape
    check without an evaluation order to follow (an IndexError escaped validation)."""
    doc = _scan_doc()
    bc = doc["data"]["content"][1]["base"]["content"][0]["content"][1]
    assert bc["__type__"] == "Broadcasted"
    bc["output_weaves"] = []
    diags = ncdc.Spec(load_text(json.dumps(doc), "<test>")).validate()
    assert any(d.severity == "error" for d in diags)


@pytest.mark.parametrize("case", [400714])
def test_corpus_cases_that_once_raised_validate_typed(docs, case):
    """Cases of the corpus whose validation once raised (an array holding an array in its
    shape reached the shape comparison: ``'Array' object has no attribute 'uid'``)."""
    limit = sys.get_int_max_str_digits()
    try:
        rng, text, how = _case(case, docs)
        spec = ncdc.Spec(load_text(text, "<fuzz>", salvage=rng.random() < 0.3))
        diags = spec.validate()
    finally:
        sys.set_int_max_str_digits(limit)
    assert any(d.code == "type-error" for d in diags), (how, diags)
