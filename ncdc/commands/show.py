"""``ncdc show``: the block tree with repetitions and dom → cod shapes."""
from __future__ import annotations

import argparse
import sys

from .common import (
    add_block_arg,
    add_size_args,
    add_spec_args,
    emit_json,
    load_spec,
    parse_assignments,
)

DESCRIPTION = """\
The block tree: titles, repetitions and dom -> cod shapes.

Shapes are symbolic (axis names) unless a preset or sizes are given; then they are numbers. A
size no preset binds and the command line does not give (b for released) is named in a note on
stderr, and the shapes depending on it stay symbolic (2*b). By default the annotation blocks
(drawn in place: casts, elementwise maps) are hidden; --all shows them.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("show", help="the block tree with shapes", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_args(p)
    add_size_args(p, default_preset="none: symbolic shapes")
    add_block_arg(p, default="the whole model", dest_help="start at this block")
    p.add_argument("--depth", type=int, default=None, metavar="N",
                   help="show this many block levels")
    p.add_argument("--all", action="store_true",
                   help="include annotation blocks (casts, elementwise maps)")
    p.add_argument("--expansions", action="store_true",
                   help="instead: the operator expansions a viewer export writes out "
                        "(auxiliary.expansions): operator, formula, description, diagram")
    p.set_defaults(run=run)


def optional_binding(spec, args, what: str):
    """A binding when ``--preset``/``--size``/``--constant`` asks for one (sizes alone complete
    the released values), else None. Unbound symbols are named on stderr."""
    if not args.preset and not args.size and not args.constant:
        return None
    preset = args.preset or "released"
    binding = spec.bind(preset, parse_assignments(args.size, "--size"),
                        parse_assignments(args.constant, "--constant"))
    note_unbound(spec, binding, preset, what)
    return binding


def note_unbound(spec, binding, preset: str, what: str) -> None:
    """Name the unbound symbols ``data`` uses (stderr), so symbolic leftovers are explained."""
    if not binding.unbound:
        return
    from ncdc.spec.checks_binding import symbol_uses
    from ncdc.spec.checks_sites import all_sites

    uses = symbol_uses(all_sites(spec.data))
    used = sorted((s for s in binding.unbound if s in uses), key=lambda s: (s.label, s.uid))
    if not used:
        return
    names = spec.size_names()
    which = ", ".join(f"{names.get(s, s.label)} ({_place(uses[s][0])})" for s in used)
    keys = " ".join(f"--size {names.get(s, s.label)}=N" for s in used)
    print(f"note: preset {preset!r} gives no value to {which}; {what} that depend on them are "
          f"shown symbolically (give {keys})", file=sys.stderr)


def _place(use) -> str:
    what, path, titles = use
    where = " / ".join(titles) if titles else path
    return f"{what}, in {where}" if where else what


def size_value(expr, env, names):
    """A size for JSON: an int when bound, else its symbolic text (qualified names)."""
    from ncdc.sizenames import expr_text

    text = expr_text(expr, env, names)
    return int(text) if text.lstrip("-").isdigit() else text


def array_json(obj, env, names) -> dict:
    """An array for JSON: datatype text, axis labels, and the shape as a list of sizes."""
    from ncdc.ir.axes import Axis
    from ncdc.ir.shapes import array_text

    if isinstance(obj, Axis):
        return {"datatype": None, "axes": [obj.label], "shape": [size_value(obj.size, env,
                                                                              names)]}
    shape = getattr(obj, "shape", None)
    if shape is None:
        return {"datatype": None, "axes": [], "shape": [], "text": array_text(obj, env)}
    return {"datatype": str(obj.datatype), "axes": [a.label for a in shape],
            "shape": [size_value(a.size, env, names) for a in shape]}


def _array_text(obj, env, names) -> str:
    a = array_json(obj, env, names)
    if "text" in a:
        return a["text"]
    dims = ", ".join(map(str, a["shape"])) if env is not None else ", ".join(a["axes"])
    return f"{a['datatype']}[{dims}]" if a["datatype"] is not None else dims


def block_rows(spec, root, env=None, depth=None, include_all=False) -> list[dict]:
    """One row per block of the tree below ``root`` (pre-order); sizes are ints when bound."""
    from ncdc.ir.errors import SpecError
    from ncdc.ir.morphisms import Block, Truncated
    from ncdc.ir.tags import BlockDrawing
    from ncdc.ir.walk import walk
    from ncdc.naming import labels
    from ncdc.spec.summary import cut_blocks

    cuts = {c.path: c for c in cut_blocks(spec.doc, root)} if spec.doc is not None else {}
    names = spec.size_names()
    label_of = labels(root)
    rows = []
    for s in walk(root):
        node = s.node
        level = len(s.titles)
        if depth is not None and level > depth:
            continue
        if isinstance(node, Block):
            if not include_all and node.tag.drawing is BlockDrawing.BODY_IN_PLACE:
                continue
            row = {"title": node.title, "label": label_of.get(s.path, node.title),
                   "path": s.path, "level": level,
                   "repetition": size_value(node.tag.repetition, env, names),
                   "truncated": False}
            try:
                row["dom"] = [array_json(o, env, names) for o in node.dom]
                row["cod"] = [array_json(o, env, names) for o in node.cod]
                row["text"] = (", ".join(_array_text(o, env, names) for o in node.dom),
                               ", ".join(_array_text(o, env, names) for o in node.cod))
            except (SpecError, RecursionError):  # a cut or ill-typed body: no shapes
                row["dom"] = row["cod"] = row["text"] = None
            rows.append(row)
        elif isinstance(node, Truncated) and node.expected == "Block":
            cut = cuts.get(s.path)
            title = (cut.inferred_title or cut.title) if cut else None
            rows.append({"title": title, "label": None, "path": s.path, "level": level,
                         "repetition": None, "truncated": True,
                         "inferred": bool(cut and cut.tag_lost), "dom": None, "cod": None,
                         "text": None})
    return rows


def run(args) -> int:
    from ncdc.ir.names import shown_text

    if args.expansions:
        from .expansions import run_show

        return run_show(args)
    spec = load_spec(args)
    binding = optional_binding(spec, args, "shapes")
    env = binding.env if binding is not None else None
    root = spec.site(args.block).node if args.block else spec.data
    rows = block_rows(spec, root, env, args.depth, args.all)
    if args.json:
        emit_json({"source": spec.source, "root": getattr(root, "path", ""),
                   "bound": env is not None,
                   "blocks": [{k: v for k, v in r.items() if k != "text"} for r in rows]})
        return 0
    shown = 0
    for r in rows:
        indent = "  " * (r["level"] - 1 if r["level"] else 0)
        if r["truncated"]:
            name = r["title"] or "(untitled)"
            how = ", tag lost: title inferred" if r.get("inferred") else ""
            print(f"{indent}{name}?  [cut off by truncation{how}]  {r['path']}")
        else:
            rep = "" if r["repetition"] == 1 else f" ×{r['repetition']}"
            shapes = "" if r["text"] is None else f"  ({r['text'][0]}) → ({r['text'][1]})"
            print(f"{indent}{shown_text(r['title'])}{rep}{shapes}")
        shown += 1
    if not shown:
        print("(no blocks)")
    return 0
