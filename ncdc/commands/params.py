"""``ncdc params``: every array the spec needs but does not hold — learned parameters and
fixed arrays — per occurrence (keys of FORMAT.md §13.2, see :mod:`ir.params`): key, shape,
element count, learned or fixed; totals at the end. Sizes come from ``--preset`` (default
``released``) and ``--size``; a count that depends on an unbound size stays symbolic. A block
repeated more than 64 times is listed once (keys ``title@i``, ``×N``), its counts multiplied."""
from __future__ import annotations

import sympy
from ncdc.ir.shapes import size_text

from .common import add_size_args, add_spec_args, emit_json, load_spec, parse_assignments
from .show import note_unbound


def add_parser(sub) -> None:
    p = sub.add_parser("params", help="learned and fixed arrays: key, shape, elements",
                       description=__doc__)
    add_spec_args(p)
    add_size_args(p, default_preset="released")
    p.add_argument("--block", default=None, help="only the arrays below this block")
    p.set_defaults(run=run)


def _count(shape, env):
    """(int or None, text) of the element count of ``shape``."""
    expr = sympy.Mul(*shape) if shape else sympy.Integer(1)
    text = size_text(expr, env)
    return (int(text), text) if text.lstrip("-").isdigit() else (None, text)


def _dim(label: str, size, env) -> str:
    text = size_text(size, env)
    return label if text == label else f"{label}={text}"


def run(args) -> int:
    spec = load_spec(args)
    preset = args.preset or "released"
    binding = spec.bind(preset, parse_assignments(args.size, "--size"),
                        parse_assignments(args.constant, "--constant"))
    env = binding.env
    root = spec.site(args.block).node if args.block else spec.data
    rows = []
    totals = {"learned": [0, sympy.Integer(0)], "fixed": [0, sympy.Integer(0)]}
    for p in spec.params(root, binding, collapse=64):
        reps = () if p.count == 1 else (sympy.sympify(p.count),)
        n, text = _count(tuple(p.shape) + reps, env)
        kind = "learned" if p.learned else "fixed"
        rows.append({"key": p.key, "role": p.role, "kind": kind,
                     "shape": [_dim(lab, s, env) for lab, s in zip(p.axis_labels, p.shape)],
                     "elements": n if n is not None else text, "datatype": str(p.datatype),
                     "json_path": p.json_path})
        if reps:
            rows[-1]["count"] = size_text(reps[0], env)
        totals[kind][0] += reps[0] if reps else 1
        totals[kind][1] += sympy.Mul(*p.shape, *reps)
    summary = {}
    for kind, (count, expr) in totals.items():
        n, text = _count((expr,), env)
        c, ctext = _count((sympy.sympify(count),), env)
        summary[kind] = {"arrays": c if c is not None else ctext,
                         "elements": n if n is not None else text}
    if any(not isinstance(v["elements"], int) for v in summary.values()) and not args.json:
        note_unbound(spec, binding, preset, "element counts")
    if args.json:
        emit_json({"source": spec.source, "preset": preset, "params": rows, "totals": summary})
        return 0
    if not rows:
        print("(no learned or fixed arrays)")
        return 0
    kw = max(len(r["key"]) for r in rows)
    sw = max(len("[" + ", ".join(r["shape"]) + "]") for r in rows)
    print(f"{'KEY':<{kw}}  {'SHAPE':<{sw}}  {'ELEMENTS':>15}  KIND")
    for r in rows:
        shape = "[" + ", ".join(r["shape"]) + "]"
        el = f"{r['elements']:,}" if isinstance(r["elements"], int) else r["elements"]
        times = f" (x{r['count']})" if "count" in r else ""
        print(f"{r['key']:<{kw}}  {shape:<{sw}}  {el:>15}  {r['kind']}{times}")
    for kind, t in summary.items():
        el = f"{t['elements']:,}" if isinstance(t["elements"], int) else t["elements"]
        print(f"total {kind}: {t['arrays']} arrays, {el} elements")
    return 0
