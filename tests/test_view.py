"""``ncdc view`` without a browser: the scene holds what the IR holds, labels are plain text
where the title is plain, the page is small and self-contained, JSON cannot end its <script>.

Expected values are computed here from the IR by walks of this file's own (or written by hand),
not by the scene builder under test. The browser tests are in test_view_browser.py.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ncdc.cli import main
from ncdc.ir import operators as ops
from ncdc.ir.morphisms import Block, Broadcasted, Morphism, Truncated
from ncdc.ir.params import param_specs
from ncdc.view.labels import plain_label

ROOT = Path(__file__).resolve().parents[1]
PYNCD = ROOT / "tests" / "data" / "pyncd"


def nearest_blocks(node: Morphism) -> list[Morphism]:
    """The blocks drawn directly inside ``node``: the nearest Blocks (and cut blocks) below it,
    through wiring, operators' blocks and cut sequences, not into other blocks."""
    out = []
    stack = [c for _, c in reversed(kids(node))]
    while stack:
        m = stack.pop()
        if isinstance(m, Block) or (isinstance(m, Truncated) and m.expected == "Block"
                                    and isinstance(m.partial.get("body"), Morphism)):
            out.append(m)
            continue
        stack.extend(c for _, c in reversed(kids(m)))
    return out


def kids(m: Morphism):
    if isinstance(m, Block):
        return [("", m.body)]
    if isinstance(m, Truncated) and m.expected == "Block":
        body = m.partial.get("body")
        return [("", body)] if isinstance(body, Morphism) else []
    if isinstance(m, Truncated):
        return [("", c) for c in (m.partial.get("content") or ()) if isinstance(c, Morphism)]
    return list(m.children())


def all_terms(root: Morphism):
    stack = [root]
    while stack:
        m = stack.pop()
        yield m
        stack.extend(c for _, c in kids(m))


@pytest.fixture(scope="module")
def scene(bundled):
    from ncdc.view.scene import build_scene

    return build_scene(bundled.data)


def test_page_is_self_contained_and_small(page_path):
    text = page_path.read_text("utf-8")
    assert len(text.encode()) <= 3_000_000
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|@import|url\(\s*['\"]?https?:", text)
    assert "default-src 'none'" in text  # the page forbids itself any fetch
    assert "ELK" not in text  # the layout is the page's own
    # deterministic: the same spec writes the same bytes
    again = page_path.with_name("again.html")
    assert main(["view", "-o", str(again)]) == 0
    assert again.read_bytes() == page_path.read_bytes()


def test_three_box_page_is_small(tmp_path):
    out = tmp_path / "conv.html"
    assert main(["view", str(PYNCD / "convolution_matrix.json"), "-o", str(out)]) == 0
    text = out.read_text("utf-8")
    scene = json.loads(re.search(r'<script type="application/json" id="scene">(.*?)</script>',
                                 text, re.DOTALL).group(1))
    assert len(scene["nodes"]) - 1 == 3  # three boxes
    assert out.stat().st_size <= 600_000


def test_math_library_only_when_some_label_is_latex(tmp_path):
    from ncdc.view.page import render_page

    plain = {"root": "root", "nodes": {"root": {"kind": "root", "label": "m", "children": []}},
             "edges": {}, "tags": {}, "tapes": {}}
    assert "var temml" not in render_page(plain, "m", "")
    plain["nodes"]["b"] = {"kind": "block", "label": "x", "latex": "W_{q}", "children": []}
    assert "var temml" in render_page(plain, "m", "")


def test_script_json_cannot_close_its_script():
    from ncdc.view.page import render_page, script_json

    nasty = 'a<!--b</script><script>alert(1)</script>&"'
    text = script_json({"t": nasty})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"t": nasty}
    page = render_page({"root": "root", "nodes": {"root": {"kind": "root", "label": nasty,
                                                           "children": []}},
                        "edges": {}, "tags": {}, "tapes": {}}, nasty, "")
    assert "<!--" not in page.split("<body>", 1)[1]
    # the first </script> after the scene's opening tag ends exactly the scene's JSON
    body = page.split('<script type="application/json" id="scene">', 1)[1].split("</script>")[0]
    assert json.loads(body)["nodes"]["root"]["label"] == nasty


def test_output_must_be_a_picture_or_page(tmp_path, capsys):
    assert main(["view", "-o", str(tmp_path / "x.txt")]) == 2
    err = capsys.readouterr().err
    assert ".html" in err and ".svg" in err and ".png" in err


def test_scene_blocks_match_the_ir(bundled, scene):
    nodes = scene["nodes"]
    top = [n for n in nodes["root"]["children"] if nodes[n]["kind"] == "block"]
    assert len(top) == len(nearest_blocks(bundled.data))
    sinkhorn = [n for n in nodes.values() if n["label"] == "Sinkhorn Round"]
    assert sinkhorn and all(n["rep"] == "19" for n in sinkhorn)
    # every wire is labelled (a cut root's inputs carry what their consumer expects)
    assert all(e["label"] for es in scene["edges"].values() for e in es)
    # every wire belongs to the container that draws both of its ends
    for cont, edges in scene["edges"].items():
        for e in edges:
            for end in (e["src"], e["dst"]):
                assert end == cont or nodes[end]["parent"] == cont


def test_wire_axes_are_the_arrays_axes(bundled, scene):
    """A wire into an operator carries the axis labels of that operator's domain (the IR at
    the operator's JSON path)."""
    nodes = scene["nodes"]
    checked = 0
    for es in scene["edges"].values():
        for e in es:
            dst = nodes[e["dst"]]
            if dst["kind"] != "operator":
                continue
            b = bundled.site(e["dst"]).node
            assert isinstance(b, Broadcasted)
            want = ", ".join(plain_label(a.label) for a in b.dom[e["dstPort"]].shape)
            assert e["axes"] == want, e["id"]
            checked += 1
    assert checked > 100


def test_bound_wires_carry_sizes(bundled):
    """With sizes bound, a wire reads ``x=N, m=M``: each axis with the size the binding gives
    that axis (the IR array's own axes, bound here)."""
    from ncdc.view.scene import build_scene

    env = bundled.bind("tiny").env
    scene = build_scene(bundled.data, env)
    checked = 0
    for es in scene["edges"].values():
        for e in es:
            if scene["nodes"][e["dst"]]["kind"] != "operator":
                continue
            arr = bundled.site(e["dst"]).node.dom[e["dstPort"]]
            want = ", ".join(f"{plain_label(a.label)}={int(env.subs(a.size))}" for a in arr.shape)
            assert e["boundAxes"] == want
            checked += 1
    assert checked > 100


def test_segments_are_the_parameter_keys_segments(bundled, scene):
    """Each block's ``seg`` (``Single-Pass mHC~1`` for the second mHC of a layer) is the
    segment its parameters' keys use: the key of every parameter below a block starts with
    the segs of the blocks around it, joined by ``/``."""
    nodes = scene["nodes"]
    segs = {n["seg"] for n in nodes.values() if n.get("seg")}
    assert "Single-Pass mHC~1" in segs and "Single-Pass mHC" in segs
    prefixes = set()
    for n in nodes.values():
        if n["kind"] != "operator" or not n.get("keys"):
            continue
        chain, p = [], n["parent"]
        while p != "root":
            if nodes[p]["kind"] == "block" and nodes[p].get("seg"):
                chain.append(nodes[p]["seg"])
            p = nodes[p]["parent"]
        prefixes.add("/".join(reversed(chain)))
        chain.reverse()
        for k in n["keys"]:
            # the key's leading segments, as the picture writes text (``p_{1}`` -> ``p₁``)
            head = [plain_label(s) for s in k["key"].split("/")[:len(chain)]]
            assert head == chain, (k["key"], chain)
    assert any("Single-Pass mHC~1" in p for p in prefixes)
    # the keys are the interpreter's own
    keys = {p.key for p in param_specs(bundled.data)}
    assert {k["key"] for n in nodes.values() for k in n.get("keys", ())} <= keys


def test_fill_colours_and_titles_come_from_the_tags(bundled, scene):
    by_path = {m.path: m for m in all_terms(bundled.data) if isinstance(m, Block)}
    coloured = 0
    for nid, n in scene["nodes"].items():
        if n["kind"] != "block" or n.get("cut"):
            continue
        block = by_path.get(nid) or by_path.get(nid + ".operator.block")
        assert block is not None, nid
        assert n["color"] == (block.tag.fill_color or "")
        coloured += bool(n["color"])
    assert coloured >= 20


def test_operator_labels_by_meaning(scene):
    from ncdc.view.labels import operator_label

    classes = {c.__name__ for c in ops.ALL_OPERATORS}
    for n in scene["nodes"].values():
        if n["kind"] == "operator":
            assert n["label"] not in classes, n["label"]  # never a class name
            assert "\\" not in n["label"]
    labels = {n["meaning"] for n in scene["nodes"].values() if n["kind"] == "operator"}
    assert {"+", "Σ einsum", "RMSNorm", "top-k"} <= labels
    assert operator_label(ops.SoftMax()) == "softmax"
    assert operator_label(ops.Normalize(centred=True)) == "LayerNorm"
    assert operator_label(ops.AdditionOp()) == "+"


@pytest.mark.parametrize("latex,text,math", [
    (r"\text{Attention Core}", "Attention Core", False),
    ("Attention Core", "Attention Core", False),
    (r"\text{Add \& Norm}", "Add & Norm", False),
    (r"Add \& Norm", "Add & Norm", False),
    (r"L_q", "L_q", True),
    (r"L_{k}", "Lₖ", True),
    (r"H_{0}", "H₀", True),
    (r"x + \varepsilon_{\mathrm{hc}}", "x + ε_hc", True),
    (r"\tfrac{3}{2}x", "3/2x", True),
    (r"\lvert x \rvert", "| x |", True),
])
def test_plain_labels(latex, text, math):
    from ncdc.view.labels import is_math

    assert plain_label(latex) == text
    assert is_math(latex) is math


def test_transformer_labels_have_no_backslash(transformer):
    from ncdc.view.scene import build_scene

    scene = build_scene(transformer.data)
    titles = {n["label"] for n in scene["nodes"].values()}
    assert "Add & Norm" in titles and "Attention Core" in titles
    assert all("\\" not in t for t in titles)
    core = next(n for n in scene["nodes"].values() if n["label"] == "Attention Core")
    assert core["latex"] == ""  # plain text: the panel shows it as text, not mathematics


def test_picture_without_chromium_is_a_usage_error(tmp_path, capsys, monkeypatch):
    import shutil

    monkeypatch.delenv("NCDC_CHROMIUM", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["view", "-o", str(tmp_path / "x.png")]) == 2
    assert "needs Chromium" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_negative_depth_is_a_usage_error(tmp_path, capsys):
    assert main(["view", "--depth", "-1", "-o", str(tmp_path / "x.html")]) == 2
    assert "--depth" in capsys.readouterr().err


# ---------------------------------------------------------------- ncdc graph (for tools)


def test_graph_dot_has_nested_clusters_and_repetition(tmp_path):
    dot = tmp_path / "mc.dot"
    assert main(["graph", "--block", "Mixing Coefficients", "-o", str(dot)]) == 0
    text = dot.read_text("utf-8")
    assert 'label="Sinkhorn Round ×19"' in text
    # clusters nest: a cluster opened inside another one before that one closes
    depth, deepest = 0, 0
    for line in text.splitlines():
        if line.lstrip().startswith("subgraph"):
            depth += 1
            deepest = max(deepest, depth)
        elif line.strip() == "}" and depth:
            depth -= 1
    assert deepest >= 2


def test_graph_has_no_unknown_wire_labels(tmp_path):
    import networkx as nx

    gml = tmp_path / "all.graphml"
    assert main(["graph", "-o", str(gml)]) == 0
    g = nx.read_graphml(gml)
    assert all(a["shape"] not in ("?", "unknown", "") for *_, a in g.edges(data=True))
    inner = [a["cluster_path"] for _, a in g.nodes(data=True)
             if a["cluster_label"] == "Single-Pass mHC"]
    assert inner and all(p.startswith("data.content[2] > ") for p in inner)  # inside the layer
