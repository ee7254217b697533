"""Validation on hand-broken specs: the right code, JSON path, titles and axes; all problems in
one pass; never an exception."""
from __future__ import annotations

import json

import ncdc
from ncdc.ir.errors import Diagnostic
from ncdc.spec.loader import load_text
from ncdc.spec.validate import counts, validate
from tests.conftest import DATA, find_typed


def _spec(doc):
    return ncdc.Spec(load_text(json.dumps(doc), "<test>"))


def _codes(diags, severity="error"):
    return [d.code for d in diags if d.severity == severity]


def test_older_examples_validate_cleanly(transformer, attention_core):
    assert transformer.validate() == []
    assert attention_core.validate() == []
    assert transformer.validate(transformer.bind("tiny")) == []


def test_all_problems_in_one_pass():
    spec = ncdc.load(DATA / "many_errors.json")
    diags = spec.validate()
    got = [(d.severity, d.code, d.json_path, d.titles) for d in diags]
    assert got == [
        ("error", "compose-mismatch", "data.body.content[0].body.content[1]",
         ("Broken", "Inner")),
        ("error", "rearrangement-bounds", "data.body.content[0].body.content[2].mapping",
         ("Broken", "Inner")),
        ("error", "operator-arity", "data.body.content[1].operator.signature", ("Broken",)),
        ("error", "weave-degree", "data.body.content[2].input_weaves[0]", ("Broken",)),
        ("error", "reindexing-domain", "data.body.content[3].reindexings[1]", ("Broken",)),
        ("warning", "tape-unbalanced", "data.body.content[4]", ("Broken",)),
    ]
    assert diags[0].axes == ("x", "h", "m")
    assert "content[0] gives R[x, h] but content[1] takes R[x, m]" in diags[0].message
    assert counts(diags) == {"error": 5, "warning": 1, "info": 0}
    assert all(isinstance(d, Diagnostic) for d in diags)
    # the same input gives the same diagnostics
    assert [str(d) for d in spec.validate()] == [str(d) for d in diags]


def test_compose_mismatch_in_attention_core(attention_core_json):
    path, bc = find_typed(attention_core_json, "Broadcasted")[0]
    assert path == "data.body.content[0].content[0].content[0]"
    bc["output_weaves"][0]["datatype"] = {"__type__": "Natural",
                                          "max_value": {"__type__": "Integer", "_value": 9}}
    diags = _spec(attention_core_json).validate()
    (d,) = [d for d in diags if d.severity == "error"]
    assert d.code == "compose-mismatch"
    assert d.json_path == "data.body.content[0].content[0].content[1]"
    assert d.titles == ("Attention Core",)
    assert set(d.axes) == {"h", "q", "x"}
    assert "incompatible datatypes" in d.message and "Nat<9>[h, q, x]" in d.message


def test_product_arity(attention_core_json):
    prod = attention_core_json["data"]["body"]["content"][0]
    assert prod["__type__"] == "ProductOfMorphisms"
    del prod["content"][1]                     # the product now gives 1 wire, 2 are taken
    diags = _spec(attention_core_json).validate()
    errors = [d for d in diags if d.severity == "error"]
    assert [(d.code, d.json_path) for d in errors] == [("product-arity", "data.body.content[1]")]
    assert "splits into parts of 1 wire(s)" in errors[0].message


def test_leniency_is_a_warning(attention_core_json):
    _, bc = find_typed(attention_core_json, "Broadcasted")[0]
    bc["output_weaves"][0]["datatype"] = {
        "__type__": "Quantified", "wraps": {"__type__": "Reals"},
        "size": {"__type__": "Integer", "_value": 16}, "vector": {"__type__": "Integer",
                                                                  "_value": 2},
        "form": {"__registered__": "enum", "type": "Encoding", "name": "BF16"}, "scale": None}
    diags = _spec(attention_core_json).validate()
    assert [(d.severity, d.code) for d in diags] == [("warning", "datatype-leniency")]


def test_rearrangement_and_einops_rank(attention_core_json):
    rearr = attention_core_json["data"]["body"]["content"][0]["content"][1]
    rearr["mapping"] = [0, 7]
    path, einops = find_typed(attention_core_json, "Einops")[1]
    einops["signature"] = [[0, 1], [0]]
    diags = _spec(attention_core_json).validate()
    got = {(d.code, d.json_path) for d in diags if d.severity == "error"}
    assert ("rearrangement-bounds", "data.body.content[0].content[1].mapping") in got
    assert ("operator-rank", path + ".signature[0]") in got


def test_weave_invariants(mk, load_doc):
    x, n = mk.axis("x", 3), mk.axis("n", 2)
    lin = mk.bc(mk.op("Linear", "W", bias=False), [], [mk.weave([n])], [])   # no backup_degree
    add = mk.bc(mk.op("AdditionOp", "+"), [mk.weave(["*"])], [mk.weave(["*", "*"])],
                [mk.rearr([0], [x])], backup=[x])
    spec = load_doc(mk.doc(mk.product(lin, add)))
    diags = spec.validate()
    got = [(d.severity, d.code, d.json_path) for d in diags]
    assert ("warning", "backup-degree", "data.content[0]") in got
    assert ("error", "backup-degree", "data.content[1].backup_degree") in got
    assert ("error", "weave-degree", "data.content[1].output_weaves[0]") in got


def test_box_ports(mk, load_doc):
    x, n, m = mk.axis("x", 3), mk.axis("n", 2), mk.axis("m", 4)
    tag = mk.tag(r"\text{Inner}")
    inner = mk.block(mk.bc(mk.op("Linear", "W", bias=False), [mk.weave(["*", n])],
                           [mk.weave(["*", m])], [mk.rearr([0], [x])]), tag)
    box = mk.bc(mk.op("BlockOperator", "box", block=inner), [mk.weave(["*", x, m])],
                [mk.weave(["*", x, m])], [mk.rearr([0], [n])])
    diags = load_doc(mk.doc(box)).validate()
    errs = [(d.code, d.json_path) for d in diags if d.severity == "error"]
    assert errs == [("box-port", "data.input_weaves[0]")]
    assert "'Inner'" in diags[0].message


def test_tape_balance_counts_parawrap_order(mk, load_doc):
    x = mk.axis("x", 3)
    slot = mk.slot("ids")
    arr = mk.array([x])
    ident = mk.rearr_arrays([0], [arr])
    write = {"__type__": "ParaWrap", "body": ident, "grabs": [None], "drops": [mk.ref(slot)]}
    read = {"__type__": "ParaWrap", "body": mk.rearr_arrays([0], [arr]),
            "grabs": [mk.ref(slot)], "drops": [None]}
    ok = load_doc(mk.doc(mk.composed(write, read)))
    assert ok.validate() == []
    bad = load_doc(mk.doc(mk.product(read, write)))
    (d,) = bad.validate()
    assert (d.code, d.json_path) == ("tape-unbalanced", "data.content[0].grabs[0]")


def test_parawrap_entries(mk, load_doc):
    x = mk.axis("x", 3)
    w = {"__type__": "ParaWrap", "body": mk.rearr_arrays([0, 0], [mk.array([x])]),
         "grabs": [None, None], "drops": [None]}
    diags = load_doc(mk.doc(w)).validate()
    assert [(d.code, d.json_path) for d in diags] == [("parawrap-entries", "data.grabs"),
                                                      ("parawrap-entries", "data.drops")]


def test_repeated_block_must_map_its_domain_to_itself(mk, load_doc):
    x, n, m = mk.axis("x", 3), mk.axis("n", 2), mk.axis("m", 4)
    tag = mk.tag(r"\text{Loop}", repetition=3)
    body = mk.bc(mk.op("Linear", "W", bias=False), [mk.weave(["*", n])], [mk.weave(["*", m])],
                 [mk.rearr([0], [x])])
    (d,) = load_doc(mk.doc(mk.block(body, tag))).validate()
    assert (d.code, d.json_path, d.titles) == ("block-repetition", "data", ("Loop",))


def test_operator_rules(mk, load_doc):
    x, n = mk.axis("x", 3), mk.axis("n", 2)
    emb = mk.bc(mk.op("Embedding", "E"), [mk.weave(["*"])], [mk.weave(["*", n])],
                [mk.rearr([0], [x])])                           # a real index
    l1 = mk.bc(mk.op("L1Norm", "L", contracted=False, epsilon=mk.int(0)),
               [mk.weave([x, n])], [mk.weave([x, n])], [mk.rearr([], [])])   # two target axes
    ar = mk.bc(mk.op("Arithmetic", "f", formula={"__type__": "FreeInput"}),
               [mk.weave(["*", n])], [mk.weave(["*", n])], [mk.rearr([0], [x])])
    ew = mk.bc(mk.op("Elementwise", "\\zeta"), [mk.weave(["*"])], [mk.weave(["*"])],
               [mk.rearr([0], [x])])
    diags = load_doc(mk.doc(mk.product(emb, l1, ar, ew))).validate()
    got = [(d.severity, d.code, d.json_path) for d in diags]
    assert got == [
        ("error", "operator-type", "data.content[0].input_weaves[0]"),
        ("error", "operator-rank", "data.content[1].input_weaves[0]"),
        ("error", "operator-rank", "data.content[2].input_weaves[0]"),
        ("warning", "unknown-elementwise", "data.content[3].operator"),
    ]


def test_einops_group_sizes(mk, load_doc):
    x, a, b = mk.axis("x", 3), mk.axis("a", 4), mk.axis("b", 5)
    e = mk.bc(mk.op("Einops", "e", signature=[[0], [0]]), [mk.weave(["*", a]),
                                                           mk.weave(["*", b])],
              [mk.weave(["*"])], [mk.rearr([0], [x]), mk.rearr([0], [x])])
    (d,) = load_doc(mk.doc(e)).validate()
    assert (d.code, d.json_path, d.axes) == ("einops-group", "data.operator.signature",
                                             ("a", "b"))


def test_stride_rows_need_a_binding_and_spare_sparse_reads(mk, load_doc):
    x, c, e, y = mk.axis("x", 3), mk.axis("c", 6), mk.axis("E", 2), mk.axis("y", 4)
    w = mk.axis("w|x", 2, kind="AffineSparseAxis", guides=[mk.ref(x)],
                guide_strides=[mk.int(1)], stride=mk.int(-1), shift=mk.int(0), extent=None)
    qgrp = mk.stride([e, y], [(c, [4, 1], 0)])                 # reads 0..7 of c (6): past it
    view = mk.bc(mk.op("View", "qgrp"), [mk.weave(["*"])], [mk.weave(["*", "*"])], [qgrp])
    win = mk.stride([x, w], [(x, [1, -1], 0)])                 # reads -1..2 of x: by design
    view2 = mk.bc(mk.op("View", "win"), [mk.weave(["*"])], [mk.weave(["*", "*"])], [win])
    spec = load_doc(mk.doc(mk.product(view, view2)))
    assert spec.validate() == []
    diags = spec.validate(spec.bind(None))
    (d,) = diags
    assert (d.severity, d.code) == ("warning", "stride-out-of-range")
    assert d.json_path == "data.content[0].reindexings[0]._cod_stride_shift[0]"
    assert "positions 0..7 of axis c (size 6)" in d.message and d.axes == ("c", "E", "y")


def test_unbound_symbols_are_named_with_their_uses(mk, load_doc):
    bsym = mk.symbol("b")
    x = mk.axis("x", {"__type__": "Multiplication",
                      "content": [mk.int(2), mk.ref(bsym)]})
    tag = mk.tag(r"\text{Top}")
    v = mk.bc(mk.op("View", "id"), [mk.weave(["*"])], [mk.weave(["*"])], [mk.rearr([0], [x])])
    spec = load_doc(mk.doc(mk.block(v, tag)))
    (d,) = spec.validate(spec.bind(None))
    assert (d.severity, d.code, d.axes, d.titles) == ("warning", "unbound-symbol", ("b",),
                                                       ("Top",))
    assert "the size of axis x" in d.message and "--size b=N" in d.message
    assert spec.validate(spec.bind(None, {"b": 3})) == []


def test_truncated_spec_validates_what_survived(attention_core_json):
    text = json.dumps(attention_core_json)
    cut = text.index('"__type__": "WeightedTriangularLower"') + 5
    spec = ncdc.Spec(load_text(text[:cut], "<cut>", salvage=True))
    diags = spec.validate()
    assert not _codes(diags)
    assert {d.code for d in diags} == {"truncated"}
    assert any(d.severity == "warning" and d.json_path == "data" for d in diags)


def test_validate_accepts_a_bare_morphism(bundled):
    mc = bundled.block("Mixing Coefficients")
    assert validate(mc) == []
