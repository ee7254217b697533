"""``ncdc view``: the diagram as one self-contained, interactive HTML page (see DESCRIPTION)."""
from __future__ import annotations

import os

from .common import (
    add_block_arg,
    add_size_args,
    add_spec_args,
    emit_json,
    load_spec,
)
from .show import optional_binding

DESCRIPTION = """The diagram as a neural circuit diagram: one self-contained, interactive HTML
page (works offline), or a picture (.svg, .png; drawn by a headless Chromium).

Blocks are boxes in their fill colour that open and close (the page starts at --depth levels
open), repeated and lifted blocks are stacked boxes with ×N, operators are labelled by what they
compute, wires carry their axes (with sizes when a preset or sizes are given), tape reads and
writes are named ports; an operator the file defines by an expansion (auxiliary.expansions) is a
dashed box whose + opens the expansion's diagram inside it. The page zooms (wheel), pans (drag),
fits (f), opens levels (0-9), saves the picture (SVG), and its side panel shows the selected
block's description, formula, parameters, JSON path and other occurrences."""


def add_parser(sub) -> None:
    p = sub.add_parser("view", help="draw the diagram (.html interactive page, .svg, .png)",
                       description=DESCRIPTION)
    add_spec_args(p)
    add_size_args(p, default_preset="none (symbolic shapes)")
    add_block_arg(p, default="the whole model", dest_help="the block to draw")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="output file, ending in .html, .svg or .png")
    p.add_argument("--depth", type=int, default=0, metavar="N",
                   help="levels of blocks open in the drawing (default 0: the top level)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ncdc.ir.errors import SpecError, UsageError
    from ncdc.view.opened import openings
    from ncdc.view.page import render_page
    from ncdc.view.scene import build_scene

    from .output import write_output, write_text

    ext = os.path.splitext(args.output)[1].lower()  # one of OUTPUT_EXTS["view"] (common.py)
    if args.depth < 0:
        raise UsageError(f"--depth {args.depth}: give 0 or more levels")
    if ext in (".svg", ".png"):
        from ncdc.view.export import find_chromium
        find_chromium()  # before any work
    spec = load_spec(args)
    binding = optional_binding(spec, args, "wire labels")
    root = spec.site(args.block).node if args.block else spec.data
    name = getattr(root, "title", "") if args.block else os.path.basename(spec.source)
    scene = build_scene(root, binding.env if binding is not None else None, name,
                        openings(spec.doc))
    bound = (f"sizes: {args.preset or 'released'}" if binding is not None
             else "sizes: symbolic")
    page = render_page(scene, name, bound, depth=args.depth, export=ext in (".svg", ".png"))
    text = page
    if ext in (".svg", ".png"):
        from ncdc.view.export import page_svg, svg_png
        text = page_svg(page)
    try:
        if ext == ".png":
            write_output(args.output, lambda tmp: svg_png(text, tmp), "--output")
        else:
            write_text(args.output, text, "--output")
    except OSError as exc:
        raise SpecError(f"cannot write {args.output}: {exc.strerror}") from None
    # the diagram's own boxes and wires: not those of the expansions drawn inside operators
    inside = {i for i, n in scene["nodes"].items() if ">" in i or "expansion" in n}
    own = [n for i, n in scene["nodes"].items() if ">" not in i]
    info = {"output": args.output, "bytes": os.path.getsize(args.output),
            "blocks": sum(1 for n in own if n["kind"] == "block"), "boxes": len(own) - 1,
            "wires": sum(len(v) for k, v in scene["edges"].items() if k not in inside)}
    if args.json:
        emit_json(info)
    else:
        print(f"wrote {args.output}: {info['blocks']} blocks, {info['boxes']} boxes, "
              f"{info['wires']} wires, {info['bytes'] / 1e3:,.0f} kB")
    return 0
