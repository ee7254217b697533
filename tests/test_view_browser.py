"""``ncdc view`` in a real headless Chromium (Debian's ``chromium``, driven by playwright):
navigation (zoom about the cursor, pan, fit, zoom to a box, levels, minimap), layout (no box
under the panel, none overlapping, stacked repeats, fill colours, axis labels), text (no
LaTeX left in labels, plain headings), export (the page's save button, ``-o x.svg``/``x.png``)
and the two screenshots in docs/images/, regenerated here.

Skipped, with the reason, only when no Chromium or playwright is installed. Expected values
come from the IR by this file's own walks (test_view.py's helpers), not from the scene builder.
"""
from __future__ import annotations

import os
import shutil
import struct
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ncdc.cli import main
from ncdc.ir.morphisms import Block, Broadcasted
from ncdc.view.labels import plain_label
from tests.test_view import nearest_blocks

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
CHROMIUM = next((p for p in (os.environ.get("NCDC_CHROMIUM"), shutil.which("chromium"),
                             shutil.which("chromium-browser")) if p), None)
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed "
                                    "(Debian: apt-get install chromium)")


@pytest.fixture(scope="module")
def transformer_page(tmp_path_factory, transformer):
    out = tmp_path_factory.mktemp("view") / "transformer.html"
    assert main(["view", str(Path(transformer.source)), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no Chromium installed (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def open_page(browser, path, width=1600, height=1000):
    pg = browser.new_page(viewport={"width": width, "height": height}, accept_downloads=True)
    pg.problems = []
    pg.requests = []
    pg.on("console", lambda m: m.type in ("error", "warning") and pg.problems.append(m.text))
    pg.on("pageerror", lambda e: pg.problems.append(str(e)))
    pg.on("request", lambda r: pg.requests.append(r.url))
    pg.goto(Path(path).as_uri())
    pg.stats = pg.evaluate("window.__ncdc.ready")
    return pg


@pytest.fixture
def page(browser, page_path):
    pg = open_page(browser, page_path)
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


def screen_rects(pg, selector="#canvas g.node"):
    """Each drawn box's rectangle on the screen (its main shape), by id."""
    return pg.evaluate("""(sel) => Object.fromEntries(Array.from(document.querySelectorAll(sel))
        .map(g => { const r = g.querySelector(':scope > rect.shape').getBoundingClientRect();
                    return [g.getAttribute('data-id'), [r.left, r.top, r.right, r.bottom]]; }))""",
                       selector)


def rect_of(pg, selector):
    return pg.evaluate("""(sel) => { const r = document.querySelector(sel).getBoundingClientRect();
        return [r.left, r.top, r.right, r.bottom]; }""", selector)


def inside(r, box, slack=0.5):
    return (r[0] >= box[0] - slack and r[1] >= box[1] - slack and r[2] <= box[2] + slack
            and r[3] <= box[3] + slack)


def block_id(pg, title, parent=None):
    return next(i for i in drawn(pg, "block", parent)
                if pg.evaluate("(id) => window.__ncdc.scene.nodes[id].label", i) == title)


def mixing_chain(bundled):
    swl = next(b for b in nearest_blocks(bundled.data)
               if getattr(b, "title", "") == "Sliding Window Layer")
    mhc = nearest_blocks(swl)[0]
    return swl, mhc


# ---------------------------------------------------------------- loading, size, speed


def test_loads_offline_fast_and_without_errors(page, page_path):
    assert page.problems == []
    assert set(page.requests) == {page_path.as_uri()}
    assert page.stats["firstFrameMs"] < 1500


# ---------------------------------------------------------------- navigation


def test_fit_shows_every_top_level_box_beside_the_panel(page, bundled):
    stage = rect_of(page, "#stage")
    panel = rect_of(page, "aside")
    assert stage[2] <= panel[0] + 0.5  # the drawing's viewport is the area beside the panel
    for _ in range(2):
        rects = screen_rects(page)
        assert len(rects) >= len(nearest_blocks(bundled.data))
        for nid, r in rects.items():
            assert inside(r, stage), nid
            assert r[2] <= panel[0] or r[0] >= panel[2], nid  # nothing under the panel
        # after zooming in and pressing f, the same holds again
        page.mouse.move(400, 500)
        page.mouse.wheel(0, -800)
        page.keyboard.press("f")


def test_wheel_zooms_about_the_cursor(page):
    cx, cy = 500.0, 420.0
    before = page.evaluate("() => ({...window.__ncdc.view})")
    stage = rect_of(page, "#canvas")
    page.mouse.move(cx, cy)
    page.mouse.wheel(0, -300)
    page.wait_for_timeout(50)
    after = page.evaluate("() => ({...window.__ncdc.view})")
    assert after["s"] > before["s"] * 1.2
    # the drawing's point under the cursor stays under it: (c - t) / s is unchanged
    lx, ly = cx - stage[0], cy - stage[1]
    assert (lx - before["tx"]) / before["s"] == pytest.approx((lx - after["tx"]) / after["s"], abs=0.5)
    assert (ly - before["ty"]) / before["s"] == pytest.approx((ly - after["ty"]) / after["s"], abs=0.5)
    # and on the screen: every box grew by the same factor about the cursor
    k = after["s"] / before["s"]
    page.keyboard.press("f")
    one = screen_rects(page)
    page.mouse.move(cx, cy)
    page.mouse.wheel(0, -300)
    page.wait_for_timeout(50)
    two = screen_rects(page)
    for nid in list(one)[:5]:
        assert two[nid][0] - cx == pytest.approx((one[nid][0] - cx) * k, abs=1.0)
        assert two[nid][1] - cy == pytest.approx((one[nid][1] - cy) * k, abs=1.0)
    # ctrl+wheel (a pinch) zooms too
    s = page.evaluate("window.__ncdc.view.s")
    page.keyboard.down("Control")
    page.mouse.wheel(0, 40)
    page.keyboard.up("Control")
    page.wait_for_timeout(50)
    assert page.evaluate("window.__ncdc.view.s") < s


def test_two_finger_pinch_zooms(page):
    s0 = page.evaluate("window.__ncdc.view.s")
    page.evaluate("""() => {
        const svg = document.getElementById('canvas');
        const fire = (type, id, x, y) => svg.dispatchEvent(new PointerEvent(type, {
            pointerId: id, pointerType: 'touch', clientX: x, clientY: y, bubbles: true }));
        fire('pointerdown', 11, 400, 500); fire('pointerdown', 12, 600, 500);
        for (let x = 620; x <= 800; x += 20) fire('pointermove', 12, x, 500);
        fire('pointerup', 11, 400, 500); fire('pointerup', 12, 800, 500);
    }""")
    assert page.evaluate("window.__ncdc.view.s") == pytest.approx(2 * s0, rel=1e-6)


def test_drag_pans_and_minimap_follows(page):
    assert page.evaluate("document.getElementById('minimap').classList.contains('hidden')")
    page.mouse.move(600, 500)
    page.mouse.wheel(0, -1200)  # zoomed in: part of the drawing is off screen
    page.wait_for_timeout(50)
    assert not page.evaluate("document.getElementById('minimap').classList.contains('hidden')")
    before = page.evaluate("() => ({...window.__ncdc.view})")
    mini = page.evaluate("() => document.getElementById('mini-view').getAttribute('x')")
    page.mouse.move(300, 300)
    page.mouse.down()
    page.mouse.move(350, 320, steps=4)
    page.mouse.move(420, 360, steps=4)
    page.mouse.up()
    after = page.evaluate("() => ({...window.__ncdc.view})")
    assert after["tx"] - before["tx"] == pytest.approx(120, abs=1)
    assert after["ty"] - before["ty"] == pytest.approx(60, abs=1)
    assert after["s"] == before["s"]
    assert page.evaluate("() => document.getElementById('mini-view').getAttribute('x')") != mini
    assert page.locator("#canvas g.node.selected").count() == 0  # a drag is not a click


def test_zoom_to_selected_block(page):
    swl = block_id(page, "Sliding Window Layer")
    page.evaluate("(id) => window.__ncdc.select(id)", swl)
    small = screen_rects(page)[swl]
    page.keyboard.press("z")
    r = screen_rects(page)[swl]
    stage = rect_of(page, "#stage")
    assert inside(r, stage)
    # centred, and as large as fits (or 2.5 times its drawn size)
    assert (r[0] + r[2]) / 2 == pytest.approx((stage[0] + stage[2]) / 2, abs=2)
    assert (r[1] + r[3]) / 2 == pytest.approx((stage[1] + stage[3]) / 2, abs=2)
    grow = (r[2] - r[0]) / (small[2] - small[0])
    fills = max((r[2] - r[0]) / (stage[2] - stage[0]), (r[3] - r[1]) / (stage[3] - stage[1]))
    assert fills > 0.9 or page.evaluate("window.__ncdc.view.s") == pytest.approx(2.5)
    assert grow > 1.3


def test_levels_expand_all_and_collapse_all(page, bundled):
    nodes = page.evaluate("window.__ncdc.scene.nodes")
    top = len(drawn(page))
    page.keyboard.press("1")
    one = len(drawn(page))
    # depth 1: the top-level blocks are open, their children drawn
    want = top + sum(len(nodes[b]["children"]) for b in drawn(page, "block", "root"))
    assert one == want
    page.click("#expand-all")
    assert len(drawn(page)) == len(nodes) - 1  # every box of the scene
    stage = rect_of(page, "#stage")
    assert all(inside(r, stage) for r in screen_rects(page).values())  # fitted
    page.click("#collapse-all")
    assert len(drawn(page)) == top


def test_boxes_never_overlap(page, bundled):
    for b in mixing_chain(bundled):
        expand(page, b.path)
    rects = page.evaluate("""() => Array.from(document.querySelectorAll('#canvas g.node'))
        .map(g => { const r = g.querySelector(':scope > rect.shape');
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


def test_the_drawing_uses_both_directions(page):
    page.click("#expand-all")
    w, h = page.evaluate("() => [window.__ncdc.layout().width, window.__ncdc.layout().height]")
    assert w / h < 4  # folded into rows, not one long strip


# ---------------------------------------------------------------- diagram content


def test_block_counts_at_each_level(page, bundled):
    expected_top = nearest_blocks(bundled.data)
    assert len(drawn(page, "block")) == len(expected_top)
    swl = next(b for b in expected_top if getattr(b, "title", "") == "Sliding Window Layer")
    expand(page, swl.path)
    inside_ = nearest_blocks(swl)
    assert len(drawn(page, "block", swl.path)) == len(inside_)
    page.evaluate("(id) => window.__ncdc.collapse(id)", swl.path)
    assert len(drawn(page, "block")) == len(expected_top)


def test_fill_colours_and_stacked_repeats(page, bundled):
    swl, mhc = mixing_chain(bundled)
    for b in (swl, mhc):
        expand(page, b.path)
    mc = block_id(page, "Mixing Coefficients", mhc.path)
    t0 = time.perf_counter()
    expand(page, mc)
    assert time.perf_counter() - t0 < 2
    boxes = page.evaluate("""() => Array.from(document.querySelectorAll('#canvas g.node.block'))
        .map(g => [g.getAttribute('data-id'), g.querySelector(':scope > .title').textContent,
                   (g.querySelector(':scope > .rep') || {}).textContent || null,
                   g.querySelectorAll(':scope > rect.copy').length,
                   getComputedStyle(g.querySelector(':scope > rect.shape')).fill])""")
    by_title = {b[1]: b for b in boxes}
    assert by_title["Sinkhorn Round"][2] == "×19" and by_title["Sinkhorn Round"][3] == 2
    assert by_title["Mixing Coefficients"][3] == 2  # lifted over x: stacked
    assert by_title["Single-Pass mHC"][3] == 0
    # each block's fill is its tag's fill_color (from the IR)
    coloured = 0
    for nid, _, _, _, fill in boxes:
        m = bundled.site(nid).node
        if not isinstance(m, (Block, Broadcasted)):
            continue  # a cut block: no tag
        block = m if isinstance(m, Block) else m.operator.block
        if block.tag.fill_color:
            h = block.tag.fill_color.lstrip("#")
            rgb = tuple(int(h[i:i + 2], 16) for i in (0, 2, 4))
            assert fill == f"rgb({rgb[0]}, {rgb[1]}, {rgb[2]})", nid
            coloured += 1
    assert coloured >= 5


def test_wire_labels_are_the_axes(page, bundled):
    swl, mhc = mixing_chain(bundled)
    for b in (swl, mhc):
        expand(page, b.path)
    mc = block_id(page, "Mixing Coefficients", mhc.path)
    expand(page, mc)
    wires = page.evaluate("""(id) => Array.from(document.querySelectorAll('#canvas g.wire'))
        .map(g => [g.getAttribute('data-dst'), g.getAttribute('data-id'),
                   (g.querySelector('.wire-label') || {}).textContent])
        .filter(w => w[0].startsWith(id + '.'))""", mc)
    checked = 0
    for dst, wid, text in wires:
        node = page.evaluate("(id) => window.__ncdc.scene.nodes[id]", dst)
        if node["kind"] not in ("operator", "block") or text is None:
            continue  # a fanned-out wire is labelled once, at its source
        port = page.evaluate("(w) => window.__ncdc.scene.edges[w.split('#')[0]]"
                             ".find(e => e.id === w).dstPort", wid)
        b = bundled.site(dst).node
        assert isinstance(b, (Broadcasted, Block))
        assert text == ", ".join(plain_label(a.label) for a in b.dom[port].shape)
        checked += 1
    assert checked >= 6


def test_tape_reads_and_writes_are_named_ports(page, bundled):
    tapes = page.evaluate("""() => Array.from(document.querySelectorAll('#canvas g.node.tape'))
        .map(g => g.querySelector('.title').textContent)""")
    assert "ids ▸" in tapes and "▸ ids" in tapes  # a write and a read of the slot `ids`


# ---------------------------------------------------------------- text


def all_label_text(pg):
    return pg.evaluate("""() => Array.from(document.querySelectorAll('#canvas text'))
        .map(t => t.textContent)""")


def test_labels_carry_no_latex(browser, page_path, transformer_page):
    for path in (page_path, transformer_page):
        pg = open_page(browser, path)
        pg.click("#expand-all")
        texts = all_label_text(pg)
        assert len(texts) > 20
        for t in texts:
            assert "\\" not in t and "\\text" not in t and "{" not in t, t
        pg.close()


def test_plain_headings_are_text_and_latex_is_math(browser, transformer_page):
    pg = open_page(browser, transformer_page)
    pg.click("#expand-all")
    core = block_id(pg, "Attention Core")
    pg.evaluate("(id) => window.__ncdc.select(id)", core)
    h2 = pg.locator("#details h2")
    assert h2.locator("math").count() == 0
    assert h2.inner_text().strip() == "Attention Core"
    norm = block_id(pg, "Add & Norm")
    pg.evaluate("(id) => window.__ncdc.select(id)", norm)
    assert pg.locator("#details h2").inner_text().strip() == "Add & Norm"
    # an operator whose name is LaTeX gets mathematics in the panel
    op = pg.evaluate("""() => Object.values(window.__ncdc.scene.nodes)
        .find(n => n.kind === 'operator' && n.latex && document.querySelector(
              `#canvas g.node[data-id="${CSS.escape(n.id)}"]`)).id""")
    pg.evaluate("(id) => window.__ncdc.select(id)", op)
    assert pg.locator("#details h2 math").count() == 1
    pg.close()


def test_within_uses_the_parameter_key_labels(page, bundled):
    swl, _mhc = mixing_chain(bundled)
    second = nearest_blocks(swl)[1]
    expand(page, swl.path)
    expand(page, second.path)
    mc = block_id(page, "Mixing Coefficients", second.path)
    page.evaluate("(id) => window.__ncdc.select(id)", mc)
    within = page.locator("#details dd").nth(1).inner_text()
    assert within == "Sliding Window Layer / Single-Pass mHC~1"
    keys = page.locator("#details table.params td.mono").all_inner_texts()
    assert keys and all(k.startswith("Sliding Window Layer/Single-Pass mHC~1/") for k in keys)
    # and the box itself says ~1, as the keys do
    titles = page.evaluate("""(id) => document.querySelector(`#canvas g.node[data-id="${CSS.escape(id)}"] > .title`).textContent""",
                           second.path)
    assert titles == "Single-Pass mHC~1"


def test_search_closes_on_enter_and_keyboard(page):
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "search"
    page.keyboard.type("Expert Gate")
    first = page.locator("#results li").first
    assert "Expert Gate" in first.inner_text()
    page.keyboard.press("Enter")
    assert page.locator("#results li").count() == 0  # the dropdown closes
    assert not page.locator("#results").is_visible()
    sel = page.locator("#canvas g.node.selected")
    assert sel.count() == 1
    assert sel.locator(".title").text_content() == "Expert Gate"
    assert inside(screen_rects(page)[sel.get_attribute("data-id")], rect_of(page, "#stage"))
    assert "Expert Gate" in page.locator("#details h2").inner_text()
    assert "e*m + e" in page.locator("#details").inner_text()  # its cost, symbolic
    before = len(drawn(page))
    page.keyboard.press("ArrowRight")
    assert len(drawn(page)) > before
    page.keyboard.press("ArrowLeft")
    assert len(drawn(page)) == before


def test_title_with_comment_opener_draws(browser, tmp_path, transformer_json):
    """A title holding ``<!--`` and ``</script>`` still gives a working page."""
    import json

    nasty = "Evil <!-- </script> Block"
    text = json.dumps(transformer_json).replace("Attention Core", nasty)
    spec = tmp_path / "nasty.json"
    spec.write_text(text, encoding="utf-8")
    out = tmp_path / "nasty.html"
    assert main(["view", str(spec), "-o", str(out), "--depth", "9"]) == 0
    pg = open_page(browser, out)
    assert pg.problems == []
    assert nasty in all_label_text(pg)
    pg.close()


# ---------------------------------------------------------------- export


def test_save_picture_button_downloads_svg(page):
    with page.expect_download() as dl:
        page.click("#save")
    path = dl.value.path()
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    ns = {"s": "http://www.w3.org/2000/svg"}
    assert len(root.findall(".//s:g[@data-kind='block']", ns)) == len(drawn(page, "block"))
    assert root.find("s:style", ns) is not None  # styled on its own


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@needs_chromium
def test_cli_writes_svg_and_png(tmp_path, capsys):
    svg = tmp_path / "mc.svg"
    png = tmp_path / "mc.png"
    assert main(["view", "--block", "Mixing Coefficients", "--depth", "1", "-o", str(svg)]) == 0
    root = ET.parse(svg).getroot()
    w, h = int(root.get("width")), int(root.get("height"))
    ns = {"s": "http://www.w3.org/2000/svg"}
    titles = [t.text for t in root.findall(".//s:text[@class='title']", ns)]
    assert "Sinkhorn Round" in titles
    assert main(["view", "--block", "Mixing Coefficients", "--depth", "1", "-o", str(png)]) == 0
    pw, ph = _png_size(png.read_bytes())
    assert (pw, ph) == (2 * w, 2 * h)  # twice the drawing's size
    assert png.stat().st_size > 10_000


# ---------------------------------------------------------------- screenshots for the README


def test_screenshots(browser, page_path, bundled):
    """docs/images/view-top.png: the first screen of the bundled spec; view-mixing-
    coefficients.png: Mixing Coefficients opened, zoomed to. Each under 500 kB."""
    IMAGES.mkdir(parents=True, exist_ok=True)
    pg = open_page(browser, page_path, 1600, 1000)
    top = IMAGES / "view-top.png"
    pg.screenshot(path=str(top))
    swl, mhc = mixing_chain(bundled)
    for b in (swl, mhc):
        expand(pg, b.path)
    mc = block_id(pg, "Mixing Coefficients", mhc.path)
    expand(pg, mc)
    pg.evaluate("(id) => { window.__ncdc.select(id); window.__ncdc.zoomTo(id); }", mc)
    shot = IMAGES / "view-mixing-coefficients.png"
    pg.screenshot(path=str(shot))
    pg.close()
    for p in (top, shot):
        assert 20_000 < p.stat().st_size < 500_000
        assert _png_size(p.read_bytes()) == (1600, 1000)
