"""The view's operator expansions without a browser: every occurrence the file's
``auxiliary.expansions`` defines is marked and holds the expansion's diagram, wired from its
input ports to its output ports; the page stays deterministic and the bundled one unchanged.

Expected counts come from the raw JSON of the files (the expansions' own documents, parsed
here), not from the scene builder under test.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import ncdc
from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.walk import walk
from ncdc.view.opened import Opening, openings
from ncdc.view.page import needs_math, render_page
from ncdc.view.scene import build_scene

EXTERNAL = Path(__file__).resolve().parent / "data" / "external"
FILES = ["mit-zardini-lab+tsncd__small.json", "mit-zardini-lab+tsncd__swa.json"]


def raw_expansions(name: str) -> dict[int, dict]:
    """Expansion number -> (its operator, its document parsed) from the file itself."""
    raw = json.loads((EXTERNAL / name).read_text("utf-8"))
    return {int(k): {"operator": v["operator"], "doc": json.loads(v["expansion"])}
            for k, v in raw["auxiliary"]["expansions"].items()}


def count_type(obj, name: str) -> int:
    if isinstance(obj, dict):
        return (obj.get("__type__") == name) + sum(count_type(v, name) for v in obj.values())
    if isinstance(obj, list):
        return sum(count_type(v, name) for v in obj)
    return 0


def inside(nodes: dict, nid: str, ancestor: str) -> bool:
    p = nodes[nid]["parent"]
    while p is not None:
        if p == ancestor:
            return True
        p = nodes[p]["parent"]
    return False


@pytest.fixture(scope="module", params=FILES)
def loaded(request):
    spec = ncdc.load(str(EXTERNAL / request.param))
    return request.param, spec, build_scene(spec.data, None, request.param, openings(spec.doc))


def test_each_expansion_marks_its_occurrence(loaded):
    name, _, scene = loaded
    marked = {n["expansion"]["key"]: n for n in scene["nodes"].values() if "expansion" in n}
    raw = raw_expansions(name)
    assert set(marked) == set(raw)
    for key, node in marked.items():
        assert node["kind"] == "operator"
        assert node["op"] == raw[key]["operator"]   # the export's name of the operator
        assert node["expansion"]["error"] == ""
        assert node["expansion"]["formula"].startswith("\\mathrm{")


def test_the_expansion_is_drawn_inside_its_occurrence(loaded):
    name, _, scene = loaded
    nodes, raw = scene["nodes"], raw_expansions(name)
    for node in (n for n in nodes.values() if "expansion" in n):
        nid = node["id"]
        within = [i for i in nodes if inside(nodes, i, nid)]
        # the expansions here are operators only: one box per Broadcasted of its document
        assert len(within) == count_type(raw[node["expansion"]["key"]]["doc"]["data"],
                                         "Broadcasted")
        assert all(i.startswith(nid + ">") for i in within)
        assert not any(nodes[i]["kind"] in ("input", "output", "root") for i in within)
        edges = scene["edges"][nid]
        for e in edges:     # every wire joins boxes of the expansion or the occurrence's ports
            for end, port, count in (("src", "srcPort", "outputs"), ("dst", "dstPort", "inputs")):
                if e[end] == nid:
                    assert 0 <= e[port] < node["inputs" if end == "src" else "outputs"]
                else:
                    assert e[end] in within and 0 <= e[port] < nodes[e[end]][count]
        assert sorted(e["srcPort"] for e in edges if e["src"] == nid) == [0] * len(
            [e for e in edges if e["src"] == nid])
        assert [e["dstPort"] for e in edges if e["dst"] == nid] == [0]  # one output, fed once
        assert any(e["src"] == nid for e in edges)


def test_the_softmax_expansion_is_exp_sum_reciprocal_product():
    spec = ncdc.load(str(EXTERNAL / FILES[0]))
    scene = build_scene(spec.data, None, "small", openings(spec.doc))
    occ = next(n for n in scene["nodes"].values() if n.get("op") == "SoftMax")
    kinds = [scene["nodes"][c]["op"] for c in occ["children"]]
    assert sorted(kinds) == ["Arithmetic", "Arithmetic", "Einops", "Einops"]
    # the input feeds the exponential, whose result reaches both the sum and the last product
    edges = scene["edges"][occ["id"]]
    first = [e["dst"] for e in edges if e["src"] == occ["id"]]
    assert len(first) == 1 and scene["nodes"][first[0]]["op"] == "Arithmetic"
    fed = sorted(scene["nodes"][e["dst"]]["op"] for e in edges if e["src"] == first[0])
    assert fed == ["Einops", "Einops"]


def test_an_expansion_that_cannot_open_is_marked_with_why(bundled):
    spec = ncdc.load(str(EXTERNAL / FILES[0]))
    site = spec.doc.broadcasts[3]  # the SoftMax
    scene = build_scene(spec.data, None, "x", {site: Opening(3, "SoftMax", None, "broken")})
    node = scene["nodes"][site]
    assert node["expansion"]["error"] == "broken" and node["children"] == []
    two_in = next(s.node for s in walk(bundled.data)
                  if isinstance(s.node, Broadcasted) and len(tuple(s.node.dom)) == 2)
    scene = build_scene(spec.data, None, "x", {site: Opening(3, "SoftMax", two_in)})
    node = scene["nodes"][site]
    assert node["children"] == []
    assert node["expansion"]["error"] == ("the expansion takes 2 and gives 1 arrays; the "
                                          "occurrence takes 1 and gives 1")


def test_pages_are_byte_stable_and_typeset_the_definitions(loaded):
    name, spec, scene = loaded
    again = build_scene(spec.data, None, name, openings(spec.doc))
    assert render_page(scene, name, "sizes: symbolic") == render_page(again, name,
                                                                      "sizes: symbolic")
    assert needs_math(scene)


def test_the_bundled_page_is_unchanged(bundled):
    assert openings(bundled.doc) == {}
    assert build_scene(bundled.data, None, "m", openings(bundled.doc)) == build_scene(
        bundled.data, None, "m")


def test_expansions_nest_and_each_opens_inside_its_own_occurrence(tmp_path):
    """small.json with RMSNorm's definition written in as the expansion of every operator of
    the SoftMax's definition: the ones that take and give one array open inside it, the
    two-input product is marked with why it cannot."""
    raw = json.loads((EXTERNAL / FILES[0]).read_text("utf-8"))
    exps = raw["auxiliary"]["expansions"]
    inner = {str(k): dict(exps["2"], auxiliary=None) for k in range(4)}
    exps["3"]["auxiliary"] = {"expansions": inner}
    path = tmp_path / "nested.json"
    path.write_text(json.dumps(raw), "utf-8")
    spec = ncdc.load(str(path))
    scene = build_scene(spec.data, None, "nested", openings(spec.doc))
    nodes = scene["nodes"]
    softmax = next(n for n in nodes.values() if n.get("op") == "SoftMax")
    marked = [nodes[c] for c in softmax["children"] if "expansion" in nodes[c]]
    assert len(marked) == 4
    rmsnorm_boxes = count_type(raw_expansions(FILES[0])[2]["doc"]["data"], "Broadcasted")
    for node in marked:
        two_in = node["inputs"] == 2
        assert bool(node["expansion"]["error"]) == two_in
        assert len(node["children"]) == (0 if two_in else rmsnorm_boxes)
        assert all(c.startswith(node["id"] + ">") and c.count(">") == 2
                   for c in node["children"])
    assert sum(n["inputs"] == 2 for n in marked) == 1
    assert openings(spec.doc, depth=1)[softmax["id"]].inner == {}
