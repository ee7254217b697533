"""Every pyncd export in tests/data/external (copied from public repositories, see the README
there): each diagram validates and passes ``ncdc check`` at the tiny preset, or is refused
with the typed reason the README predicts. A file added to the folder without an entry here
fails :func:`test_every_file_has_an_expectation`."""
from __future__ import annotations

import json

import pytest

import ncdc
from ncdc.cli import main
from ncdc.commands.common import gate
from ncdc.expansions import check_expansions
from ncdc.ir.errors import SpecError, SpecFormatError

from .conftest import DATA

EXTERNAL = DATA / "external"
BUNDLE = "mit-zardini-lab+tsncd__compressed_term.json"

CHECKS = [
    "mit-zardini-lab+tsncd__matmul.json",
    "mit-zardini-lab+tsncd__attention.json",
    "mit-zardini-lab+tsncd__small.json",
    f"{BUNDLE}#legacy/0",
    f"{BUNDLE}#legacy/1",
    f"{BUNDLE}#compressed/0",
    f"{BUNDLE}#compressed/1",
    "william-macready+tsncd__graph_agg.json",
    "william-macready+tsncd__mlp.json",
    "william-macready+tsncd__transformer.json",
    "william-macready+pyncd__outputs_transformer.json",
    "william-macready+pyncd__outputs_html_attention_core.payload.json",
    "william-macready+pyncd__outputs_html_convolution_full.payload.json",
    "william-macready+pyncd__outputs_html_convolution_matrix.payload.json",
    "william-macready+pyncd__outputs_html_ffn_layer.payload.json",
    # its Grouped Output Projection: a bank Linear fused with the diagonal View after it, on an
    # input that carries liveness
    "mit-zardini-lab+tsncd__swa.json",
]
"""Diagrams that validate and check."""

REFUSED_TO_LOAD = {
    BUNDLE: (SpecFormatError, "is a bundle of 4 documents; name one as FILE#NAME: #legacy, "
             "#compressed, #values, #compressed_values"),
    f"{BUNDLE}#values": (SpecFormatError, "#values is an object with keys a, empty, z"),
    f"{BUNDLE}#compressed_values": (SpecFormatError, "holds no diagram spec but an object "
                                    "with keys a, empty, z"),
    f"{BUNDLE}#legacy": (SpecFormatError, "has 2 roots"),
}
"""Addresses refused when loaded: the exception class and a phrase of its message."""

INVALID = {
    # pyncd runs a repeated block as copies in sequence, each fed the previous one's outputs
    # (torch_compile.py, ConstructedBlock); this body takes three inputs and returns one.
    "william-macready+pyncd__outputs_html_transformer.payload.json": (
        "block-repetition", "block 'Transformer Layer' repeats 6 times but its codomain "
        "(R[x, m]) is not its domain (R[x, m], R[x, m], R[x, m]); repeated, the copies after "
        "the first would lack 2 of their inputs"),
    # the Scan's recurrence runs, but the file does not type at its two outer joins (the scan
    # gives [q, dh] where the next term takes [q, dh2], and its history [q, dh, l+1] where a
    # [q, dh] is taken); pyncd's own torch lowering fails at the same joins
    "william-macready+tsncd__scan_ex4.json": (
        "compose-mismatch", "content[0] gives R[q, dh] but content[1] takes R[q, dh2]"),
}
"""Files that load but do not validate: the diagnostic code and a phrase."""


def _file(address: str) -> str:
    return address.split("#")[0]


def test_every_file_has_an_expectation():
    named = {_file(a) for a in [*CHECKS, *REFUSED_TO_LOAD, *INVALID]}
    on_disk = {p.name for p in EXTERNAL.glob("*.json")}
    assert on_disk == named


@pytest.mark.parametrize("address", CHECKS)
def test_validates_and_checks(address, capsys):
    path = f"{EXTERNAL}/{address}"
    spec = ncdc.load(path)
    assert [d for d in spec.validate() if d.severity == "error"] == []
    assert main(["check", path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["checked"] >= 1 and out["mismatches"] == 0
    assert out["results"][-1]["block"].startswith("(whole model")


def test_swa_validates_and_its_expansions_are_the_two_rmsnorms():
    # Numbered by hand from swa.json: 0 the SWA block operator, 1 the sink, 2 W^{Qa}, 3 its
    # RMSNorm, 4 W^{Qb}, 5 the transpose, 6 W^{KV}, 7 its RMSNorm.
    spec = ncdc.load(f"{EXTERNAL}/mit-zardini-lab+tsncd__swa.json")
    assert spec.doc.envelope == "viewer/plain" and not spec.validate()
    assert sorted(spec.doc.auxiliary.expansions) == [3, 7]
    prefix = "data.operator.block.body.content[1]"
    assert spec.doc.broadcasts[3] == f"{prefix}.content[1].content[1]"
    assert spec.doc.broadcasts[7] == f"{prefix}.content[2].content[1]"
    results = check_expansions(spec)
    # both leave out the 1/n and the epsilon of ncdc's RMSNorm, as their description says
    assert [(r.key, r.operator, r.status) for r in results] == [
        (3, "Normalize", "differs"), (7, "Normalize", "differs")]


@pytest.mark.parametrize("address", sorted(REFUSED_TO_LOAD))
def test_refused_with_the_predicted_reason(address, capsys):
    cls, phrase = REFUSED_TO_LOAD[address]
    path = f"{EXTERNAL}/{address}"
    with pytest.raises(cls) as info:
        ncdc.load(path)
    assert type(info.value) is cls and phrase in str(info.value)
    rc = main(["validate", path])
    err = capsys.readouterr()
    assert rc == (2 if cls is SpecFormatError else 1)
    assert phrase in err.out + err.err


@pytest.mark.parametrize("address", sorted(INVALID))
def test_invalid_with_the_predicted_diagnostic(address, capsys):
    code, phrase = INVALID[address]
    path = f"{EXTERNAL}/{address}"
    errors = [d for d in ncdc.load(path).validate() if d.severity == "error"]
    assert {d.code for d in errors} == {code} and phrase in errors[0].message
    spec = ncdc.load(path)
    with pytest.raises(SpecError, match=f"refused: {code}"):
        gate(spec, spec.bind("tiny"))
    assert main(["check", path]) == 1
    assert f"refused: {code}" in capsys.readouterr().err
