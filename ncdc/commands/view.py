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

DESCRIPTION = """The diagram as one self-contained, interactive HTML page.

Blocks are nested boxes that open and close (the page starts at the top level), repeated blocks
carry ×N, operators are drawn by kind, wires carry their shapes (bound when a preset or sizes are
given), and the side panel shows the selected block's description, formula, parameters, JSON
path and its other occurrences. The page works offline."""


def add_parser(sub) -> None:
    p = sub.add_parser("view", help="write an interactive picture of the diagram (.html)",
                       description=DESCRIPTION)
    add_spec_args(p)
    add_size_args(p, default_preset="none (symbolic shapes)")
    add_block_arg(p, default="the whole model", dest_help="the block to draw")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="output file, ending in .html")
    p.set_defaults(run=run)


def run(args) -> int:
    from ncdc.ir.errors import SpecError, UsageError

    from ncdc.view.page import render_page
    from ncdc.view.scene import build_scene

    if os.path.splitext(args.output)[1].lower() not in (".html", ".htm"):
        raise UsageError(f"{args.output}: the output must end in .html")
    spec = load_spec(args)
    binding = optional_binding(spec, args, "wire labels")
    root = spec.site(args.block).node if args.block else spec.data
    name = getattr(root, "title", "") if args.block else os.path.basename(spec.source)
    scene = build_scene(root, binding.env if binding is not None else None, name)
    bound = (f"sizes: {args.preset or 'released'}" if binding is not None
             else "sizes: symbolic")
    page = render_page(scene, name, bound)
    try:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(page)
    except OSError as exc:
        raise SpecError(f"cannot write {args.output}: {exc.strerror}") from None
    blocks = sum(1 for n in scene["nodes"].values() if n["kind"] == "block")
    info = {"output": args.output, "bytes": len(page.encode("utf-8")), "blocks": blocks,
            "boxes": len(scene["nodes"]) - 1,
            "wires": sum(len(v) for v in scene["edges"].values())}
    if args.json:
        emit_json(info)
    else:
        print(f"wrote {args.output}: {info['blocks']} blocks, {info['boxes']} boxes, "
              f"{info['wires']} wires, {info['bytes'] / 1e6:.1f} MB")
    return 0
