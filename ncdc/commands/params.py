"""``ncdc params``: every array the spec needs but does not hold, per occurrence."""
from __future__ import annotations

import argparse

from .common import add_block_arg, add_size_args, add_spec_args, emit_json, load_spec
from .show import note_unbound, size_value

DESCRIPTION = """\
Every array the spec needs but does not hold, learned parameters and fixed arrays, per
occurrence: key, shape, element count, learned or fixed; totals at the end.

Keys are the enclosing block titles joined by /, a block repeated among its siblings marked ~k,
an iteration of a repeated block @i, then the operator and the role:
Sliding Window Layer/Single-Pass mHC/Mixing Coefficients/H_{0}.weight. Sizes come from --preset
(default released) and --size; a count that depends on an unbound size stays symbolic. A block
repeated more than 64 times is listed once (keys title@i, xN), its counts multiplied.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("params", help="learned and fixed arrays: key, shape, elements",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_args(p)
    add_size_args(p, default_preset="released")
    add_block_arg(p, default="the whole model", dest_help="only the arrays below this block")
    p.set_defaults(run=run)


def _dim(label: str, size) -> str:
    """``m=64`` when bound, ``m`` (or its qualified name ``k@L_{q}``) when not."""
    text = str(size)
    if text == label or text.startswith(label + "@"):
        return text
    return f"{label}={text}"


def run(args) -> int:
    import sympy

    from .common import parse_assignments

    spec = load_spec(args)
    preset = args.preset or "released"
    # an inspection command answers symbolically for any spec: no gate (``validate`` judges)
    binding = spec.bind(preset, parse_assignments(args.size, "--size"),
                        parse_assignments(args.constant, "--constant"))
    env, names = binding.env, spec.size_names()
    root = spec.site(args.block).node if args.block else spec.data
    rows = []
    totals = {"learned": [0, sympy.Integer(0)], "fixed": [0, sympy.Integer(0)]}
    for p in spec.params(root, binding, collapse=64):
        reps = () if p.count == 1 else (sympy.sympify(p.count),)
        count = sympy.Mul(*p.shape) if p.shape else sympy.Integer(1)
        kind = "learned" if p.learned else "fixed"
        rows.append({"key": p.key, "role": p.role, "kind": kind, "axes": list(p.axis_labels),
                     "shape": [size_value(s, env, names) for s in p.shape],
                     "elements": size_value(count, env, names), "datatype": str(p.datatype),
                     "json_path": p.json_path})
        if reps:
            rows[-1]["count"] = size_value(reps[0], env, names)
        totals[kind][0] += reps[0] if reps else 1
        totals[kind][1] += count * (reps[0] if reps else 1)
    summary = {kind: {"arrays": size_value(sympy.sympify(n), env, names),
                      "elements": size_value(expr, env, names)}
               for kind, (n, expr) in totals.items()}
    if any(not isinstance(v["elements"], int) for v in summary.values()) and not args.json:
        note_unbound(spec, binding, preset, "element counts")
    if args.json:
        emit_json({"source": spec.source, "preset": preset, "params": rows, "totals": summary})
        return 0
    if not rows:
        print("(no learned or fixed arrays)")
        return 0
    shapes = ["[" + ", ".join(_dim(a, n) for a, n in zip(r["axes"], r["shape"], strict=False)) + "]"
              for r in rows]
    kw = max(len(r["key"]) for r in rows)
    sw = max(len(x) for x in shapes)
    print(f"{'KEY':<{kw}}  {'SHAPE':<{sw}}  {'ELEMENTS':>15}  KIND")
    for r, shape in zip(rows, shapes, strict=True):
        el = f"{r['elements']:,}" if isinstance(r["elements"], int) else r["elements"]
        times = f" (x{r['count']})" if "count" in r else ""
        print(f"{r['key']:<{kw}}  {shape:<{sw}}  {el:>15}  {r['kind']}{times}")
    for kind, t in summary.items():
        el = f"{t['elements']:,}" if isinstance(t["elements"], int) else t["elements"]
        print(f"total {kind}: {t['arrays']} arrays, {el} elements")
    return 0
