"""The view's operator expansions in a real headless Chromium: an occurrence the file defines
by an expansion is marked (a dashed box with +); clicking + opens the expansion's diagram
inside the box, clicking − closes it; the levels (0-9, expand all) open the diagram's blocks
and leave expansions closed; opened boxes never overlap and stay inside their occurrence.

Skipped like test_view_browser.py where no Chromium or playwright is installed. Expected
boxes come from the files' raw JSON (test_view_expansions.py's helpers).
"""
from __future__ import annotations

import pytest

from ncdc.cli import main
from tests.test_view_browser import browser, drawn, open_page, screen_rects  # noqa: F401
from tests.test_view_expansions import EXTERNAL, FILES, count_type, raw_expansions


@pytest.fixture(scope="module", params=FILES)
def made(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("view") / (request.param + ".html")
    assert main(["view", str(EXTERNAL / request.param), "-o", str(out)]) == 0
    return request.param, out


@pytest.fixture
def pg(browser, made):  # noqa: F811
    page = open_page(browser, made[1])
    yield page
    assert page.problems == []
    page.close()


def marked(page) -> list[str]:
    return page.evaluate("""() => Array.from(document.querySelectorAll('#canvas g.node.expansion'))
        .map(g => g.getAttribute('data-id'))""")


def inner(page, nid):
    return [i for i in drawn(page) if i.startswith(nid + ">")]


def click_toggle(page, nid):
    page.evaluate("(id) => window.__ncdc.zoomTo(id)", nid)
    box = page.locator(f'#canvas g.node[data-id="{nid}"] > text.toggle')
    box.click()


def test_levels_leave_expansions_closed_and_every_one_is_marked(pg, made):
    name = made[0]
    pg.click("#expand-all")
    ids = marked(pg)
    assert len(ids) == len(raw_expansions(name))
    assert not any(">" in i for i in drawn(pg))
    for nid in ids:  # closed: a + to open it
        toggle = pg.locator(f'#canvas g.node[data-id="{nid}"] > text.toggle')
        assert toggle.text_content() == "+"


def test_plus_opens_the_expansion_inside_its_box_and_minus_closes_it(pg, made):
    name = made[0]
    raw = raw_expansions(name)
    pg.click("#expand-all")
    for nid in marked(pg):
        key = pg.evaluate("(id) => window.__ncdc.scene.nodes[id].expansion.key", nid)
        click_toggle(pg, nid)
        boxes = inner(pg, nid)
        assert len(boxes) == count_type(raw[key]["doc"]["data"], "Broadcasted")
        rects = screen_rects(pg)
        outer = rects[nid]
        for b in boxes:
            r = rects[b]
            assert outer[0] - 0.5 <= r[0] and r[2] <= outer[2] + 0.5
            assert outer[1] - 0.5 <= r[1] and r[3] <= outer[3] + 0.5
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                ra, rb = rects[a], rects[b]
                assert ra[2] <= rb[0] or rb[2] <= ra[0] or ra[3] <= rb[1] or rb[3] <= ra[1], (a, b)
        details = pg.inner_text("#details")
        assert f"expansion\n{key}: open" in details
        assert raw[key]["operator"] in details
        click_toggle(pg, nid)
        assert inner(pg, nid) == []


def test_an_opened_expansion_wires_its_boxes(pg):
    pg.click("#expand-all")
    nid = marked(pg)[-1]
    pg.evaluate("(id) => window.__ncdc.expand(id)", nid)
    wires = pg.evaluate("""(id) => Array.from(document.querySelectorAll('#canvas g.wire'))
        .filter(g => g.getAttribute('data-id').startsWith(id + '#')).length""", nid)
    assert wires == len(pg.evaluate("(id) => window.__ncdc.scene.edges[id]", nid))
    assert wires >= 5
    pg.keyboard.press("c")  # the levels close it again
    assert inner(pg, nid) == []


def test_a_nested_expansion_opens_inside_the_one_around_it(browser, tmp_path):  # noqa: F811
    import json

    raw = json.loads((EXTERNAL / FILES[0]).read_text("utf-8"))
    exps = raw["auxiliary"]["expansions"]
    exps["3"]["auxiliary"] = {"expansions": {str(k): dict(exps["2"], auxiliary=None)
                                             for k in range(4)}}
    spec, out = tmp_path / "nested.json", tmp_path / "nested.html"
    spec.write_text(json.dumps(raw), "utf-8")
    assert main(["view", str(spec), "-o", str(out)]) == 0
    page = open_page(browser, out)
    inner_ids = page.evaluate("""() => Object.keys(window.__ncdc.scene.nodes)
        .filter(id => (id.match(/>/g) || []).length === 2)""")
    assert inner_ids
    page.evaluate("(id) => window.__ncdc.reveal(id)", inner_ids[0])  # opens both around it
    rects = screen_rects(page)
    outer = inner_ids[0].rsplit(">", 1)[0]
    outermost = outer.split(">")[0]
    for a, b in ((inner_ids[0], outer), (outer, outermost)):
        r, box = rects[a], rects[b]
        assert box[0] - 0.5 <= r[0] and r[2] <= box[2] + 0.5
        assert box[1] - 0.5 <= r[1] and r[3] <= box[3] + 0.5
    assert page.problems == []
    page.close()
