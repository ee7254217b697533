"""Decoding: every node kind, the three envelopes, and hand-broken specs located by JSON path."""
from __future__ import annotations

import json
import re

import pytest
import sympy

import ncdc
from ncdc import ir
from ncdc.ir import operators as ops
from ncdc.ir.datatypes import BlockScale, Complex, Natural, Quantified, Reals
from ncdc.ir.errors import SpecDecodeError, SpecError, SpecFormatError
from ncdc.ir.numeric import FREE_INPUT
from ncdc.spec.builder import DECODERS
from ncdc.spec.checks_sites import all_sites
from ncdc.spec.loader import load_text
from tests.conftest import ATTENTION_CORE, DATA, TRANSFORMER, find_typed

EXTRA = DATA / "extra_kinds.json"
SPEC_FILES = (None, TRANSFORMER, ATTENTION_CORE, EXTRA, *sorted(
    p for p in (DATA / "pyncd").glob("*.json") if p not in (TRANSFORMER, ATTENTION_CORE)),
    DATA / "tensorlogic_program.json")


def _types_in(text: str) -> set[str]:
    return set(re.findall(r'"__type__":\s*"(\w+)"', text))


OWN_TESTS = {p.stem.removeprefix("test_operator_")
             for p in (DATA.parent).glob("test_operator_*.py")} | {
    t.lower() for p in (DATA.parent).glob("test_kinds_*.py")
    for t in _types_in(p.read_text(encoding="utf-8"))}
"""Operator kinds that no spec file uses but whose own test (``tests/test_operator_<kind>.py``,
or a ``tests/test_kinds_*.py`` that writes the node) decodes a hand-written node
(docs/adding-an-operator.md)."""


@pytest.fixture(scope="module")
def all_specs(bundled):
    return [bundled] + [ncdc.load(p) for p in SPEC_FILES[1:]]


@pytest.fixture(scope="module")
def extra():
    return ncdc.load(EXTRA)


def test_every_registered_type_occurs_in_some_test_spec(bundled_text):
    seen = _types_in(bundled_text)
    for p in SPEC_FILES[1:]:
        seen |= _types_in(p.read_text(encoding="utf-8"))
    assert {t for t in set(DECODERS) - seen if t.lower() not in OWN_TESTS} == set()


def test_every_ir_kind_is_decoded(all_specs):
    operators, morphisms, axes, datatypes = set(), set(), set(), set()
    for spec in all_specs:
        axes |= {type(a) for a in spec.doc.axes.values()}
        for s in all_sites(spec.data):
            morphisms.add(type(s.node))
            if isinstance(s.node, ir.Broadcasted):
                op = s.node.operator
                operators.add(type(op))
                if isinstance(op, ops.ParaBlockOperator):
                    morphisms |= {type(g) for g in op.grabs + op.drops}
                for w in s.node.input_weaves + s.node.output_weaves:
                    dt = w.datatype
                    while True:
                        datatypes.add(type(dt))
                        if isinstance(dt, Quantified):
                            if dt.scale is not None:
                                datatypes.add(type(dt.scale))
                            dt = dt.wraps
                        elif isinstance(dt, Complex):
                            dt = dt.base
                        else:
                            break
    assert {c for c in set(ops.ALL_OPERATORS) - operators
            if c.__name__.lower() not in OWN_TESTS} == set()
    assert {ir.Rearrangement, ir.StrideMorphism, ir.Composed, ir.ProductOfMorphisms, ir.Block,
            ir.Broadcasted, ir.ParaWrap, ir.Grab, ir.Drop, ir.Truncated} <= morphisms
    assert {ir.RawAxis, ir.AffineSparseAxis, ir.SparseAxis, ir.ConcatenatedAxis} <= axes
    assert {Reals, Natural, Complex, Quantified, BlockScale} <= datatypes


def _bc(spec, kind):
    return [s.node for s in all_sites(spec.data)
            if isinstance(s.node, ir.Broadcasted) and type(s.node.operator) is kind]


def test_extra_kinds_fields(extra):
    (yarn,) = _bc(extra, ops.YarnRotary)
    op = yarn.operator
    assert (op.base, op.position_stride, op.factor, op.ramp_start, op.ramp_end) == (
        10000, 1, 4, 1, 3)
    assert yarn.degree == () and str(yarn.cod[0].datatype) == "C[R]"
    (sel,) = _bc(extra, ops.IndexSelect)
    assert [str(a) for a in sel.dom] == ["Nat<5>[x]", "R[x, n]"]
    fns = [b.operator.function for b in _bc(extra, ops.Elementwise)]
    assert fns == ["relu", "identity", "sigmoid", "tanh"]
    assert len(_bc(extra, ops.Identity)) == 1
    (ar,) = _bc(extra, ops.Arithmetic)
    assert ar.operator.formula == sympy.Max(sympy.exp(FREE_INPUT), sympy.log(FREE_INPUT))
    (topk,) = _bc(extra, ops.TopK)
    ke = topk.cod[0].shape[1]
    assert isinstance(ke, ir.SparseAxis) and (ke.size, ke.activity) == (8, 2)
    (cat,) = _bc(extra, ops.ConcatenateAxes)
    whole = cat.cod[0].shape[1]
    assert isinstance(whole, ir.ConcatenatedAxis)
    assert [p.label for p in whole.parts] == ["w", "s"] and whole.label == "w + s"
    assert [r.rows[0].shift for r in cat.operator.part_reindexings] == [0, 3]
    tape = [s.node for s in all_sites(extra.data) if isinstance(s.node, (ir.Grab, ir.Drop))]
    assert [(type(t).__name__, t.tape.label) for t in tape] == [("Drop", "buf"), ("Grab", "buf")]
    assert extra.validate() == []


def test_identity_of_repository_records_is_kept(bundled):
    mc = [s.node for s in bundled.blocks() if s.node.title == "Mixing Coefficients"]
    assert len(mc) == 2
    assert mc[0].tag is mc[1].tag                      # a repository record: one object
    n_axes = {a for arr in mc[0].dom for a in arr.shape}
    assert all(bundled.doc.axes[a.uid] is a for a in n_axes)


# --------------------------------------------------------------------------- envelopes


def compress(doc) -> dict:
    """The compressed export of docs/format.md §1.5, written independently of spec.envelope:
    records in post-order, each referring only to earlier ones, identical records shared."""
    records, index = [], {}

    def put(rec):
        key = json.dumps(rec, sort_keys=False)
        if key not in index:
            index[key] = len(records)
            records.append(rec)
        return index[key]

    def enc(v):
        if isinstance(v, dict):
            flat = []
            for k, c in v.items():
                flat += [put([0, k]), enc(c)]
            return put([2, flat])
        if isinstance(v, list):
            return put([1, [enc(c) for c in v]])
        return put([0, v])

    root = enc(doc)
    return {"export_form": "compressed", "version": 1, "value_repository": records,
            "data": root}


def fingerprint(spec) -> list:
    from ncdc.ir.shapes import objects_text

    out = []
    for s in all_sites(spec.data):
        row = [s.path, type(s.node).__name__, s.titles]
        try:
            row += [objects_text(s.node.dom), objects_text(s.node.cod)]
        except SpecError:
            row.append("untyped")
        if isinstance(s.node, ir.Broadcasted):
            row.append(repr(s.node.operator))
        out.append(row)
    return out


def test_three_envelopes_load_to_the_same_structure(transformer_json, transformer):
    plain = fingerprint(transformer)
    comp = compress(transformer_json)
    assert len(json.dumps(comp)) < len(json.dumps(transformer_json))
    viewer = {"msgType": "dataUpdate", "data": json.dumps(transformer_json)}
    viewer_comp = {"msgType": "dataUpdate", "data": json.dumps(comp)}
    for env, name in ((comp, "compressed"), (viewer, "viewer/plain"),
                      (viewer_comp, "viewer/compressed")):
        spec = ncdc.Spec(load_text(json.dumps(env), "<env>"))
        assert spec.doc.envelope == name
        assert fingerprint(spec) == plain
        assert [str(d) for d in spec.validate()] == [str(d) for d in transformer.validate()]


@pytest.mark.parametrize("bad, where", [
    ({"export_form": "compressed", "version": 2, "value_repository": [], "data": 0}, "version"),
    ({"export_form": "compressed", "version": 1, "value_repository": [[1, [0]]], "data": 0},
     "value_repository[0]"),
    ({"export_form": "compressed", "version": 1, "value_repository": [[7, 1]], "data": 0},
     "value_repository[0]"),
    ({"msgType": "hello", "data": "{}"}, "msgType"),
    ({"msgType": "dataUpdate", "data": "{not json"}, "data"),
])
def test_broken_envelopes_are_format_errors(bad, where):
    with pytest.raises(SpecFormatError) as info:
        load_text(json.dumps(bad))
    assert info.value.json_path == where


# --------------------------------------------------------------------------- hand-broken specs


def _load_error(doc) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_text(json.dumps(doc), "<broken>")
    return info.value


def test_missing_einops_signature_names_type_field_and_path(attention_core_json):
    path, einops = find_typed(attention_core_json, "Einops")[0]
    del einops["signature"]
    err = _load_error(attention_core_json)
    assert isinstance(err, SpecDecodeError)
    assert err.json_path == path == "data.body.content[0].content[0].content[0].operator"
    assert err.node_type == "Einops" and err.field_name == "signature"
    assert "Einops" in str(err) and "'signature'" in str(err) and path in str(err)


def test_ill_typed_field_names_its_path(attention_core_json):
    path, einops = find_typed(attention_core_json, "Einops")[1]
    einops["signature"] = "0,0"
    err = _load_error(attention_core_json)
    assert err.json_path == path + ".signature"
    assert "wrong type" in err.message and err.field_name == "signature"


def test_unknown_type_names_it(attention_core_json):
    path, softmax = find_typed(attention_core_json, "SoftMax")[0]
    softmax["__type__"] = "SoftMaxPlus"
    err = _load_error(attention_core_json)
    assert err.json_path == path and "SoftMaxPlus" in str(err)


def test_dangling_reference(attention_core_json):
    path, weave = find_typed(attention_core_json, "Weave")[0]
    weave["_shape"][-1] = {"__ref__": 424242}
    err = _load_error(attention_core_json)
    assert err.json_path == f"{path}._shape[{len(weave['_shape']) - 1}]"
    assert "424242" in str(err)


def test_each_broken_repository_record_is_listed(attention_core_json):
    """The loader decodes every repository record and ``data`` separately and reports them all
    (and every broken morphism inside ``data``; consequences of a broken record are not
    repeated)."""
    repo = attention_core_json["uid_repository"]
    axes = sorted(k for k, v in repo.items() if v.get("__type__") == "RawAxis")[:2]
    for k in axes:
        del repo[k]["_size"]
    path, einops = find_typed(attention_core_json, "Einops")[0]
    einops["__type__"] = "Nope"
    err = _load_error(attention_core_json)
    got = sorted(p.json_path for p in err.problems)
    assert got == sorted([f"uid_repository.{k}" for k in axes] + [path])
    assert all(p.field_name == "_size" for p in err.problems if p.json_path != path)
    assert "2 more problem" in str(err)


def test_unknown_enum_member(attention_core_json):
    _, weave = find_typed(attention_core_json, "Weave")[0]
    weave["_shape"][0] = {"__registered__": "enum", "type": "WeaveMode", "name": "STRIDED"}
    err = _load_error(attention_core_json)
    assert "STRIDED" in str(err) and "TILED" in str(err)


def test_deep_nesting_is_a_decode_error_not_a_crash(mk):
    x = mk.axis("x", 2)
    m = mk.rearr_arrays([0], [mk.array([x])])
    for _ in range(400):
        m = mk.composed(m)
    text = json.dumps(mk.doc(m))
    with pytest.raises(SpecDecodeError) as info:
        load_text(text)
    assert "deep" in str(info.value)


def test_every_broken_morphism_in_data_is_reported_with_its_titles(transformer_json):
    """Two separate broken operators inside ``data``: both are reported in one pass, each at
    its own JSON path with the chain of block titles around it."""
    p1, einops = find_typed(transformer_json, "Einops")[0]
    del einops["signature"]
    softmax_path, softmax = find_typed(transformer_json, "SoftMax")[0]
    softmax["__type__"] = "NoSuchOperator"
    err = _load_error(transformer_json)
    got = {p.json_path: p for p in err.problems}
    assert set(got) == {p1, softmax_path}
    assert got[p1].node_type == "Einops" and got[p1].field_name == "signature"
    assert "NoSuchOperator" in got[softmax_path].message
    for p in got.values():
        assert p.titles[:1] == ("Transformer Layer",) and p.titles[-1] == "Attention Core"


def test_the_older_nullary_constant_operator_decodes_as_constant_op(attention_core_json):
    path, softmax = find_typed(attention_core_json, "SoftMax")[0]
    softmax.clear()
    softmax.update({"__type__": "Constant", "name": None,
                    "value": {"__type__": "Integer", "_value": 1}})
    spec = ncdc.Spec(load_text(json.dumps(attention_core_json), "<test>"))
    (op,) = [s.node.operator for s in ir.walk(spec.data) if isinstance(s.node, ir.Broadcasted)
             and s.node.operator.path == path] or [None]
    assert isinstance(op, ops.ConstantOp) and op.value == 1


