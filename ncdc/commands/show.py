"""``ncdc show``: the block tree with repetitions and dom → cod shapes.

Shapes are symbolic (axis names) unless a preset or sizes are given; then they are numbers. A
size no preset binds and the command line does not give (``b`` for ``released``) is named in a
note on stderr, and the shapes depending on it stay symbolic (``2*b``). By default the
annotation blocks (drawn ``BODY_IN_PLACE``: casts, elementwise maps) are hidden; ``--all`` shows
them.
"""
from __future__ import annotations

import sys

import sympy
from ncdc.ir.errors import SpecError
from ncdc.ir.morphisms import Block, Truncated
from ncdc.ir.shapes import array_text
from ncdc.ir.tags import BlockDrawing
from ncdc.ir.walk import walk
from ncdc.spec.summary import cut_blocks

from .common import add_size_args, add_spec_args, emit_json, load_spec, parse_assignments


def add_parser(sub) -> None:
    p = sub.add_parser("show", help="the block tree with shapes", description=__doc__)
    add_spec_args(p)
    add_size_args(p, default_preset="none (symbolic shapes)")
    p.add_argument("--block", default=None, help="start at this block (title or JSON path)")
    p.add_argument("--depth", type=int, default=None, help="show this many block levels")
    p.add_argument("--all", action="store_true",
                   help="include annotation blocks (casts, elementwise maps)")
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
    from ncdc.spec.checks_binding import size_key, symbol_uses
    from ncdc.spec.checks_sites import all_sites

    uses = symbol_uses(all_sites(spec.data))
    used = [s for s in binding.unbound if s in uses]
    if not used:
        return
    names = ", ".join(f"{s.label} ({_place(uses[s][0])})" for s in sorted(
        used, key=lambda s: (s.label, s.uid)))
    keys = " ".join(f"--size {size_key(s, spec.symbols.values())}=N" for s in sorted(
        used, key=lambda s: (s.label, s.uid)))
    print(f"note: preset {preset!r} gives no value to {names}; {what} that depend on them are "
          f"shown symbolically (give {keys})", file=sys.stderr)


def _place(use) -> str:
    what, path, titles = use
    where = " / ".join(titles) if titles else path
    return f"{what}, in {where}" if where else what


def block_rows(spec, root, env=None, depth=None, include_all=False) -> list[dict]:
    """One row per block of the tree below ``root`` (pre-order)."""
    cuts = {c.path: c for c in cut_blocks(spec.doc, root)} if spec.doc is not None else {}
    rows = []
    for s in walk(root):
        node = s.node
        level = len(s.titles)
        if depth is not None and level > depth:
            continue
        if isinstance(node, Block):
            if not include_all and node.tag.drawing is BlockDrawing.BODY_IN_PLACE:
                continue
            row = {"title": node.title, "path": s.path, "level": level,
                   "repetition": sympy.sstr(node.tag.repetition), "truncated": False}
            try:
                row["dom"] = [array_text(o, env) for o in node.dom]
                row["cod"] = [array_text(o, env) for o in node.cod]
            except (SpecError, RecursionError):  # a cut or ill-typed body: no shapes
                row["dom"] = row["cod"] = None
            rows.append(row)
        elif isinstance(node, Truncated) and node.expected == "Block":
            cut = cuts.get(s.path)
            title = (cut.inferred_title or cut.title) if cut else None
            rows.append({"title": title, "path": s.path, "level": level,
                         "repetition": None, "truncated": True,
                         "inferred": bool(cut and cut.tag_lost), "dom": None, "cod": None})
    return rows


def run(args) -> int:
    spec = load_spec(args)
    binding = optional_binding(spec, args, "shapes")
    env = binding.env if binding is not None else None
    root = spec.site(args.block).node if args.block else spec.data
    rows = block_rows(spec, root, env, args.depth, args.all)
    if args.json:
        emit_json({"source": spec.source, "root": getattr(root, "path", ""),
                   "bound": env is not None, "blocks": rows})
        return 0
    shown = 0
    for r in rows:
        indent = "  " * (r["level"] - 1 if r["level"] else 0)
        if r["truncated"]:
            name = r["title"] or "(untitled)"
            how = ", tag lost: title inferred" if r.get("inferred") else ""
            print(f"{indent}{name}?  [cut off by truncation{how}]  {r['path']}")
        else:
            rep = "" if r["repetition"] == "1" else f" ×{r['repetition']}"
            shapes = "" if r["dom"] is None else \
                f"  ({', '.join(r['dom'])}) → ({', '.join(r['cod'])})"
            print(f"{indent}{r['title']}{rep}{shapes}")
        shown += 1
    if not shown:
        print("(no blocks)")
    return 0
