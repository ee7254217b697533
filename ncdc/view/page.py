"""One self-contained HTML page that draws a scene: the vendored layout (elkjs) and LaTeX
(temml) libraries, the page's own script and style, and the scene as JSON, all inlined, so the
file opens offline and makes no network request."""
from __future__ import annotations

import html
import json
from importlib import resources

ASSETS = ("elk.bundled.js", "temml.min.js", "view.js", "view.css")


def _asset(name: str) -> str:
    return resources.files("ncdc.view").joinpath("assets", name).read_text("utf-8")


def _script_json(value) -> str:
    """JSON safe inside a <script> element: no ``</`` and no HTML comment openers."""
    text = json.dumps(value, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _script(code: str) -> str:
    return "<script>" + code.replace("</script", "<\\/script") + "</script>"


def render_page(scene: dict, title: str, binding: str) -> str:
    """The HTML text of the page (deterministic: same scene, same bytes)."""
    meta = {"title": title, "binding": binding}
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
         "script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:\">"),
        f"<title>{html.escape(title)} — ncdc view</title>",
        "<style>" + _asset("view.css") + "</style>",
        "</head><body>",
        '<header><h1 id="heading"></h1><span class="binding" id="binding"></span>',
        ('<div id="search-wrap"><input id="search" type="search" placeholder="search blocks  (/)" '
         'aria-label="search blocks"><ul id="results"></ul></div>'),
        '<span id="status"></span>',
        ('<span class="legend">+ opens a block · ×N repeats · dashed wires can hold dead '
         "positions</span></header>"),
        '<main id="stage"><svg id="canvas" xmlns="http://www.w3.org/2000/svg"></svg></main>',
        '<aside><div id="details"></div><h3>tape slots</h3><ul id="tapes"></ul></aside>',
        '<script type="application/json" id="scene">' + _script_json(scene) + "</script>",
        '<script type="application/json" id="meta">' + _script_json(meta) + "</script>",
        _script(_asset("elk.bundled.js")),
        _script(_asset("temml.min.js")),
        _script(_asset("view.js")),
        "</body></html>",
        "",
    ])


__all__ = ["render_page"]
