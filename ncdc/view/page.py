"""One self-contained HTML page that draws a scene: the page's own script (which lays the
diagram out itself) and style, the scene as JSON and, only where some title or formula is
LaTeX, the vendored LaTeX library (temml), all inlined, so the file opens offline and makes
no network request."""
from __future__ import annotations

import html
import json
from importlib import resources


def _asset(name: str) -> str:
    return resources.files("ncdc.view").joinpath("assets", name).read_text("utf-8")


def script_json(value) -> str:
    """JSON safe inside a <script> element: every ``<``, ``>`` and ``&`` written as a JSON
    escape (``\\u003c`` ...), so no ``</script>`` or ``<!--`` can occur in it."""
    text = json.dumps(value, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _script(code: str) -> str:
    return "<script>" + code.replace("</script", "<\\/script") + "</script>"


def needs_math(scene: dict) -> bool:
    """Whether any box of the scene has a LaTeX title or a formula the panel typesets (its
    own or its expansion's)."""
    return any(n.get("latex") or n.get("formula") or n.get("expansion", {}).get("formula")
               for n in scene["nodes"].values())


TOOLS = (
    '<span class="tools">'
    '<button id="fit" title="fit the drawing to the screen (f)">fit</button>'
    '<button id="zoom-sel" title="zoom to the selected box (z)">zoom to selection</button>'
    '<button id="collapse-all" title="close every block (c, 0)">collapse all</button>'
    '<button id="less" title="open one level less">−</button>'
    '<span id="depth" title="levels open">0</span>'
    '<button id="more" title="open one level more (1–9)">+</button>'
    '<button id="expand-all" title="open every block (e)">expand all</button>'
    '<button id="save" title="download the drawing as SVG">save picture</button>'
    "</span>")


def render_page(scene: dict, title: str, binding: str, depth: int = 0,
                export: bool = False) -> str:
    """The HTML text of the page (deterministic: same arguments, same bytes). ``depth``: the
    levels of blocks open at the start; ``export``: the page also writes its drawing, as SVG
    in base64, into the ``data-svg`` attribute of <body> (read by ``ncdc view -o x.svg``)."""
    meta = {"title": title, "binding": binding, "depth": depth, "export": export}
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
         "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:\">"),
        f"<title>{html.escape(title)} — ncdc view</title>",
        "<style>" + _asset("view.css") + "</style>",
        '<style id="drawing-style">' + _asset("drawing.css") + "</style>",
        "</head><body>",
        '<header><h1 id="heading"></h1><span class="binding" id="binding"></span>',
        ('<div id="search-wrap"><input id="search" type="search" placeholder="search blocks  (/)" '
         'aria-label="search blocks"><ul id="results"></ul></div>'),
        TOOLS,
        '<span id="status"></span></header>',
        ('<main id="stage"><svg id="canvas" xmlns="http://www.w3.org/2000/svg">'
         '<g id="world"></g></svg>'
         '<svg id="minimap" xmlns="http://www.w3.org/2000/svg" '
         'preserveAspectRatio="xMidYMid meet"></svg></main>'),
        '<aside><div id="details"></div><h3>tape slots</h3><ul id="tapes"></ul></aside>',
        '<script type="application/json" id="scene">' + script_json(scene) + "</script>",
        '<script type="application/json" id="meta">' + script_json(meta) + "</script>",
        _script(_asset("temml.min.js")) if needs_math(scene) else "",
        _script(_asset("view.js")),
        "</body></html>",
        "",
    ])


__all__ = ["needs_math", "render_page", "script_json"]
