"""``ncdc view``: the page is self-contained and draws what the IR holds.

The browser tests drive a real headless Chromium (Debian's ``chromium``, launched by playwright);
they are skipped, with the reason, only when no Chromium or playwright is installed. Expected
counts and shapes are computed here from the IR by a walk of this file's own, not by the scene
builder under test. Screenshots are written to ``out/view/``.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
from ncdc.ir.morphisms import Block, Broadcasted, Morphism, Truncated
from ncdc.ir.shapes import array_text

from ncdc.cli import main

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "out" / "view"
CHROMIUM = next((p for p in (os.environ.get("NCDC_CHROMIUM"), shutil.which("chromium"),
                             shutil.which("chromium-browser")) if p), None)


def nearest_blocks(node: Morphism) -> list[Morphism]:
    """The blocks drawn directly inside ``node``: the nearest Blocks (and cut blocks) below it,
    through wiring, operators' blocks and cut sequences, not into other blocks."""
    out = []
    stack = [c for _, c in reversed(_kids(node))]
    while stack:
        m = stack.pop()
        if isinstance(m, Block) or (isinstance(m, Truncated) and m.expected == "Block"
                                    and isinstance(m.partial.get("body"), Morphism)):
            out.append(m)
            continue
        stack.extend(c for _, c in reversed(_kids(m)))
    return out


def _kids(m: Morphism):
    if isinstance(m, Block):
        return [("", m.body)]
    if isinstance(m, Truncated) and m.expected == "Block":
        body = m.partial.get("body")
        return [("", body)] if isinstance(body, Morphism) else []
    if isinstance(m, Truncated):
        return [("", c) for c in (m.partial.get("content") or ()) if isinstance(c, Morphism)]
    return list(m.children())


@pytest.fixture(scope="module")
def page_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("view") / "model.html"
    assert main(["view", "-o", str(out)]) == 0
    return out


def test_page_is_self_contained(page_path):
    text = page_path.read_text("utf-8")
    assert len(text.encode()) <= 5_000_000
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|@import|url\(\s*['\"]?https?:", text)
    assert "default-src 'none'" in text  # the page forbids itself any fetch
    # deterministic: the same spec writes the same bytes
    again = page_path.with_name("again.html")
    assert main(["view", "-o", str(again)]) == 0
    assert again.read_bytes() == page_path.read_bytes()


def test_output_must_be_html(tmp_path, capsys):
    assert main(["view", "-o", str(tmp_path / "x.png")]) != 0
    assert ".html" in capsys.readouterr().err


def test_scene_blocks_match_the_ir(bundled):
    from ncdc.view.scene import build_scene

    scene = build_scene(bundled.data)
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


def test_transformer_view(tmp_path, transformer):
    out = tmp_path / "t.html"
    assert main(["view", str(Path(transformer.source)), "-o", str(out)]) == 0
    assert out.stat().st_size > 100_000


# ---------------------------------------------------------------- browser


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no Chromium installed (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser, page_path):
    pg = browser.new_page(viewport={"width": 1600, "height": 1000})
    pg.problems = []
    pg.requests = []
    pg.on("console", lambda m: m.type in ("error", "warning") and pg.problems.append(m.text))
    pg.on("pageerror", lambda e: pg.problems.append(str(e)))
    pg.on("request", lambda r: pg.requests.append(r.url))
    t0 = time.perf_counter()
    pg.goto(page_path.as_uri())
    pg.stats = pg.evaluate("window.__ncdc.ready")
    pg.load_seconds = time.perf_counter() - t0
    yield pg
    pg.close()


def drawn(pg, kind=None, parent=None):
    return pg.evaluate("""([kind, parent]) => Array.from(document.querySelectorAll('#canvas g.node'))
        .map(g => g.getAttribute('data-id'))
        .filter(id => { const n = window.__ncdc.scene.nodes[id];
                        return (!kind || n.kind === kind) && (!parent || n.parent === parent); })""",
                       [kind, parent])


def expand(pg, node_id):
    pg.evaluate("(id) => window.__ncdc.expand(id)", node_id)


def picture(pg, path: Path, node_id: str | None = None) -> None:
    """A PNG of one box (or of the whole drawing), at full size, for a person to look at."""
    w, h = pg.evaluate("(id) => window.__ncdc.frame(id)", node_id)
    pg.set_viewport_size({"width": max(200, min(w, 6000)), "height": max(200, min(h, 6000))})
    path.parent.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(path), full_page=True)


def site(spec, path):
    return spec.site(path).node


def test_loads_offline_without_errors(page, page_path):
    assert page.problems == []
    assert set(page.requests) == {page_path.as_uri()}
    assert page.stats["firstFrameMs"] < 10_000
    picture(page, SHOTS / "whole_model.png")


def test_block_counts_at_each_level(page, bundled):
    expected_top = nearest_blocks(bundled.data)
    assert len(drawn(page, "block")) == len(expected_top)
    swl = next(b for b in expected_top if getattr(b, "title", "") == "Sliding Window Layer")
    expand(page, swl.path)
    inside = nearest_blocks(swl)
    assert len(drawn(page, "block", swl.path)) == len(inside)
    assert len(drawn(page, "block")) == len(expected_top) + len(inside)
    page.evaluate("(id) => window.__ncdc.collapse(id)", swl.path)
    assert len(drawn(page, "block")) == len(expected_top)


def _mixing_coefficients(bundled):
    swl = next(b for b in nearest_blocks(bundled.data)
               if getattr(b, "title", "") == "Sliding Window Layer")
    mhc = nearest_blocks(swl)[0]
    mc_site = next(m for m in nearest_blocks(mhc) if _title(m) == "Mixing Coefficients")
    return swl, mhc, mc_site


def _title(m):
    if isinstance(m, Block):
        return m.title
    return ""


def test_sinkhorn_repetition_after_two_expansions(page, bundled):
    swl, mhc, _ = _mixing_coefficients(bundled)
    for b in (swl, mhc):
        expand(page, b.path)
    mc_id = next(i for i in drawn(page, "block", mhc.path)
                 if page.evaluate("(id) => window.__ncdc.scene.nodes[id].label", i)
                 == "Mixing Coefficients")
    t0 = time.perf_counter()
    expand(page, mc_id)
    assert time.perf_counter() - t0 < 10
    reps = page.evaluate("""(id) => Array.from(document.querySelectorAll('#canvas g.node.block'))
        .filter(g => window.__ncdc.scene.nodes[g.getAttribute('data-id')].parent === id)
        .map(g => [g.querySelector('.title').textContent, (g.querySelector('.rep') || {}).textContent])""",
                         mc_id)
    assert ["Sinkhorn Round", "×19"] in [list(r) for r in reps]
    picture(page, SHOTS / "mixing_coefficients.png", mc_id)
    # wire labels: every wire into an operator or block drawn inside Mixing Coefficients carries the
    # array that operator's domain (from the IR at the operator's JSON path) expects
    wires = page.evaluate("""(id) => Array.from(document.querySelectorAll('#canvas g.wire'))
        .map(g => [g.getAttribute('data-dst'), g.getAttribute('data-id'),
                   (g.querySelector('.wire-label') || {}).textContent])
        .filter(w => w[0].startsWith(id + '.'))""", mc_id)
    checked = 0
    for dst, wid, text in wires:
        node = page.evaluate("(id) => window.__ncdc.scene.nodes[id]", dst)
        if node["kind"] not in ("operator", "block") or text is None:
            continue  # a fanned-out wire is labelled once, at its source
        port = page.evaluate("(w) => window.__ncdc.scene.edges[w.split('#')[0]]"
                             ".find(e => e.id === w).dstPort", wid)
        b = site(bundled, dst)
        assert isinstance(b, (Broadcasted, Block))
        assert text == array_text(b.dom[port])
        checked += 1
    assert checked >= 6


def test_boxes_never_overlap(page, bundled):
    swl, mhc, _ = _mixing_coefficients(bundled)
    for b in (swl, mhc):
        expand(page, b.path)
    rects = page.evaluate("""() => Array.from(document.querySelectorAll('#canvas g.node'))
        .map(g => { const r = g.querySelector('rect.shape');
                    return [g.getAttribute('data-id'), window.__ncdc.scene.nodes[g.getAttribute('data-id')].parent,
                            +r.getAttribute('x'), +r.getAttribute('y'),
                            +r.getAttribute('width'), +r.getAttribute('height')]; })""")
    by_parent: dict = {}
    for nid, parent, x, y, w, h in rects:
        by_parent.setdefault(parent, []).append((nid, x, y, w, h))
    boxes = {r[0]: r[2:] for r in rects}
    pairs = 0
    for parent, kids in by_parent.items():
        for i, (a, ax, ay, aw, ah) in enumerate(kids):
            if parent in boxes:  # a child lies inside its open parent
                px, py, pw, ph = boxes[parent]
                assert px <= ax and py <= ay and ax + aw <= px + pw and ay + ah <= py + ph, a
            for b, bx, by, bw, bh in kids[i + 1:]:
                pairs += 1
                apart = ax + aw <= bx or bx + bw <= ax or ay + ah <= by or by + bh <= ay
                assert apart, (a, b)
    assert pairs > 20


def test_search_and_keyboard(page):
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "search"
    page.keyboard.type("Expert Gate")
    first = page.locator("#results li").first
    assert "Expert Gate" in first.inner_text()
    page.keyboard.press("Enter")
    page.evaluate("window.__ncdc.done")
    sel = page.locator("#canvas g.node.selected")
    assert sel.count() == 1
    assert sel.locator(".title").text_content() == "Expert Gate"
    assert "Expert Gate" in page.locator("#details h2").inner_text().replace("\xa0", " ")
    assert "JSON path" in page.locator("#details").inner_text()
    # its cost, symbolic without a preset: the gate's weight [e, m] and bias [e]
    assert "learned elements" in page.locator("#details").inner_text()
    assert "e*m + e" in page.locator("#details").inner_text()
    # keyboard: → opens the selected block, ← closes it
    before = len(drawn(page))
    page.keyboard.press("ArrowRight")
    page.evaluate("window.__ncdc.done")
    assert len(drawn(page)) > before
    page.keyboard.press("ArrowLeft")
    page.evaluate("window.__ncdc.done")
    assert len(drawn(page)) == before


def test_details_show_formula_params_and_occurrences(page, bundled):
    _, _, mc = _mixing_coefficients(bundled)
    mc_id = mc.path.removesuffix(".operator.block")  # drawn as the box that applies it
    page.evaluate("(id) => window.__ncdc.reveal(id)", mc_id)
    page.evaluate("window.__ncdc.done")
    details = page.locator("#details")
    assert "parameters" in details.inner_text()
    assert details.locator("math").count() >= 1  # the title/formula rendered as MathML
    # the other Mixing Coefficients (second mHC sublayer) is linked
    links = details.locator("ul.occurrences a")
    assert links.count() >= 1
    other = links.first.get_attribute("data-id")
    assert other != mc_id
    links.first.click()
    page.evaluate("window.__ncdc.done")
    assert page.locator("#canvas g.node.selected").get_attribute("data-id") == other


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
