"""Envelopes in the wild (spec.envelope, spec.auxiliary): the viewer envelope with and without
``msgType``, bundles addressed as ``FILE#name``, a ``data`` that is a list of roots, the
``auxiliary`` parts, and a typed refusal naming the keys of every other shape."""
from __future__ import annotations

import json

import pytest

import ncdc
from ncdc.cli import main
from ncdc.ir.errors import SpecFormatError
from ncdc.spec.auxiliary import broadcast_paths, read_auxiliary
from ncdc.spec.envelope import split_address
from ncdc.spec.loader import load_text

from .conftest import DATA

EXTERNAL = DATA / "external"
SMALL = EXTERNAL / "mit-zardini-lab+tsncd__small.json"
BUNDLE = EXTERNAL / "mit-zardini-lab+tsncd__compressed_term.json"
MATMUL = EXTERNAL / "mit-zardini-lab+tsncd__matmul.json"


def _plain_matmul() -> dict:
    return json.loads(MATMUL.read_text())


def test_viewer_envelope_without_msgtype_opens_like_the_message():
    raw = json.loads(SMALL.read_text())
    bare = ncdc.Spec(load_text(json.dumps(raw), "<bare>"))
    message = ncdc.Spec(load_text(json.dumps({"msgType": "dataUpdate", **raw}), "<msg>"))
    inner = ncdc.Spec(load_text(raw["data"], "<inner>"))
    assert bare.doc.envelope == message.doc.envelope == "viewer/plain"
    assert [s.path for s in bare.blocks()] == [s.path for s in inner.blocks()] != []
    assert not bare.validate() and not message.validate()


def test_auxiliary_is_read_as_blocks_legend_and_expansions():
    aux = ncdc.load(SMALL).doc.auxiliary
    raw = json.loads(SMALL.read_text())["auxiliary"]
    assert [r["codeName"] for r in aux.legend] == ["hidden", "tokens"]
    assert list(aux.blocks) == [738633497]
    assert aux.blocks[738633497].description == raw["blocks"]["738633497"]["description"]
    assert {k: e.operator for k, e in aux.expansions.items()} == {2: "Normalize", 3: "SoftMax"}
    assert aux.expansions[3].text == raw["expansions"]["3"]["expansion"]


def test_expansion_keys_number_the_broadcasts_in_import_order():
    # Written by hand from small.json: the block operator, the Linear and the RMSNorm inside
    # its block, then the SoftMax; numbered on entry, so the outer one is 0.
    doc = json.loads(json.loads(SMALL.read_text())["data"])
    assert broadcast_paths(doc) == [
        "data.content[0]", "data.content[0].operator.block.body.content[0]",
        "data.content[0].operator.block.body.content[1]", "data.content[1]"]


def test_broadcast_numbering_follows_a_reference_once():
    leaf = {"__type__": "Broadcasted", "operator": {"__type__": "X"}}
    doc = {"uid_repository": {"7": {"__type__": "Holder", "inner": leaf}},
           "data": {"__type__": "Composed", "content": [{"__ref__": 7}, leaf, {"__ref__": 7}]}}
    assert broadcast_paths(doc) == ["uid_repository.7.inner", "data.content[1]"]


def test_a_bundle_without_a_name_lists_its_documents():
    with pytest.raises(SpecFormatError) as info:
        ncdc.load(BUNDLE)
    msg = str(info.value)
    assert "bundle of 4 documents" in msg
    for name in ("#legacy", "#compressed", "#values", "#compressed_values"):
        assert name in msg


def test_a_list_data_is_several_roots_each_addressable():
    with pytest.raises(SpecFormatError) as info:
        ncdc.load(f"{BUNDLE}#legacy")
    assert "2 roots" in str(info.value) and "#legacy/0, #legacy/1" in str(info.value)
    raw = json.loads(BUNDLE.read_text())["legacy"]
    for i in range(2):
        legacy = ncdc.load(f"{BUNDLE}#legacy/{i}")
        compressed = ncdc.load(BUNDLE, part=f"compressed/{i}")
        assert legacy.data.path == compressed.data.path == f"data[{i}]"
        assert legacy.doc.envelope == "bundle/plain"
        assert compressed.doc.envelope == "bundle/compressed"
        assert legacy.source.endswith(f"#legacy/{i}")
        assert type(legacy.data.operator).__name__ == raw["data"][i]["operator"]["__type__"]
        assert not legacy.validate() and not compressed.validate()


@pytest.mark.parametrize("part, phrase", [
    ("values", "keys a, empty, z"),
    ("compressed_values", "holds no diagram spec but an object with keys a, empty, z"),
    ("nope", "has no document 'nope'; its documents: legacy, compressed, values"),
    ("legacy/2", "has roots 0 to 1, not '2'"),
    ("legacy/0/x", "nothing in it is named 'x'"),
    ("legacy//0", "empty name"),
])
def test_bad_addresses_are_typed_and_say_what_there_is(part, phrase):
    with pytest.raises(SpecFormatError) as info:
        ncdc.load(f"{BUNDLE}#{part}")
    assert phrase in str(info.value)


def test_a_single_document_has_nothing_to_address():
    with pytest.raises(SpecFormatError, match="is one diagram: nothing in it is named 'x'"):
        ncdc.load(f"{MATMUL}#x")


def test_unknown_shapes_name_the_keys_found():
    with pytest.raises(SpecFormatError) as info:
        load_text(json.dumps({"nodes": [], "edges": 3}))
    assert "keys edges, nodes" in str(info.value)
    with pytest.raises(SpecFormatError, match="unknown export_form 'future'"):
        load_text(json.dumps({**_plain_matmul(), "export_form": "future"}))


def test_uid_references_is_pyncds_name_for_the_plain_form():
    spec = ncdc.Spec(load_text(json.dumps({**_plain_matmul(), "export_form": "uid_references"})))
    assert spec.doc.envelope == "plain" and not spec.validate()


def test_a_one_root_list_needs_no_index():
    doc = _plain_matmul()
    spec = ncdc.Spec(load_text(json.dumps({**doc, "data": [doc["data"]]})))
    assert spec.data.path == "data[0]" and spec.doc.address == "0"


@pytest.mark.parametrize("aux, where", [
    ({"blocks": {"x": {}}}, "auxiliary.blocks.x"),
    ({"expansions": {"2": {"operator": "SoftMax"}}}, "auxiliary.expansions.2.expansion"),
    ({"legend": {}}, "auxiliary.legend"),
    ({"blocks": []}, "auxiliary.blocks"),
])
def test_a_malformed_auxiliary_part_is_a_format_error_at_its_path(aux, where):
    with pytest.raises(SpecFormatError) as info:
        read_auxiliary(aux)
    assert info.value.json_path == where


def test_a_file_whose_name_holds_a_hash_is_still_that_file(tmp_path):
    odd = tmp_path / "a#b.json"
    odd.write_text(MATMUL.read_text())
    assert split_address(str(odd), lambda p: p == str(odd)) == (str(odd), None)
    assert split_address("x.json#a/1", lambda p: False) == ("x.json", "a/1")
    assert ncdc.load(odd).doc.address is None


def test_every_command_takes_the_address(capsys):
    for cmd in (["validate"], ["show"], ["blocks"], ["cost"]):
        assert main([*cmd, f"{BUNDLE}#compressed/1"]) == 0, (cmd, capsys.readouterr().err)
        capsys.readouterr()
    assert main(["validate", str(BUNDLE)]) == 2
    assert "#compressed_values" in capsys.readouterr().err


def test_a_member_name_holding_a_slash_is_still_addressable():
    doc = _plain_matmul()
    spec = ncdc.Spec(load_text(json.dumps({"a/b": doc, "c": doc}), part="a/b"))
    assert spec.doc.address == "a/b" and spec.doc.envelope == "bundle/plain"


@pytest.mark.parametrize("value, phrase", [
    ({"data": {"__type__": "Composed", "content": []}}, "has data but no uid_repository"),
    ({"data": [{"__type__": "Composed", "content": []}]}, "has data but no uid_repository"),
    ({"data": 5, "settings": {}}, "a spec document is a JSON object, not int"),
    ({"data": "{}", "auxiliary": []}, "the viewer's auxiliary is an object"),
    ({"msgType": "dataUpdate"}, "the viewer message has no data"),
    ({"uid_repository": {}, "data": []}, "data is an empty list"),
    ([1, 2], "a spec document is a JSON object, not list"),
    ({}, "an object with keys none"),
])
def test_odd_shapes_are_typed_format_errors(value, phrase):
    with pytest.raises(SpecFormatError) as info:
        load_text(json.dumps(value))
    assert phrase in str(info.value)
