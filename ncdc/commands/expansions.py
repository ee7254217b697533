"""``ncdc check --expansions`` and ``ncdc show --expansions``: the operator expansions a viewer
export writes out (:mod:`ncdc.expansions`), checked against their operators or listed."""
from __future__ import annotations

import sys

from .common import emit_json, load_spec


def run_check(args) -> int:
    """Each expansion against its occurrence; exit status 1 when one differs."""
    from ncdc.expansions import TOLERANCE, check_expansions

    spec = load_spec(args)
    results = check_expansions(spec, preset=args.preset or "tiny")
    differ = [r for r in results if r.status == "differs"]
    if args.json:
        emit_json({"source": spec.source, "ok": not differ, "preset": args.preset or "tiny",
                   "tolerance": TOLERANCE, "checked": len(results),
                   "agree": sum(r.status == "agrees" for r in results),
                   "differ": len(differ), "results": [r.as_dict() for r in results]})
        return 1 if differ else 0
    if not results:
        print(f"{spec.source} writes out no operator expansions")
        return 0
    print(f"{'key':>4}  {'operator':<14}  {'result':<8}  {'max rel':>8}  occurrence")
    for r in results:
        rel = "" if r.max_rel is None else f"{r.max_rel:.1e}"
        word = {"agrees": "ok", "differs": "DIFFERS"}.get(r.status, r.status)
        print(f"{r.key:>4}  {r.operator:<14}  {word:<8}  {rel:>8}  {r.path or '-'}")
        if r.reason:
            print(f"      {r.reason}")
    skipped = sum(r.status == "skipped" for r in results)
    agree = sum(r.status == "agrees" for r in results)
    print(f"{agree} of {len(results)} expansion(s) agree with their operator"
          + (f"; {len(differ)} differ" if differ else "")
          + (f"; {skipped} skipped" if skipped else ""))
    return 1 if differ else 0


def run_show(args) -> int:
    """Every expansion: its operator, formula, description and diagram (dom -> cod, terms)."""
    from ncdc.expansions import expansion_spec, occurrence_path
    from ncdc.ir.errors import SpecError
    from ncdc.ir.morphisms import Broadcasted
    from ncdc.ir.shapes import objects_text
    from ncdc.ir.walk import walk

    spec = load_spec(args)
    rows = []
    for key, exp in sorted(spec.doc.auxiliary.expansions.items()):
        row = {**exp.as_dict(), "occurrence": occurrence_path(spec, key)}
        try:
            sub = expansion_spec(spec, key)
            row.update(dom=objects_text(sub.data.dom), cod=objects_text(sub.data.cod),
                       operators=[type(s.node.operator).__name__ for s in walk(sub.data)
                                  if isinstance(s.node, Broadcasted)],
                       expansions=len(sub.doc.auxiliary.expansions), error=None)
        except SpecError as exc:
            row.update(dom=None, cod=None, operators=[], expansions=0, error=str(exc))
        rows.append(row)
    if args.json:
        emit_json({"source": spec.source, "expansions": rows})
        return 0
    if not rows:
        print(f"{spec.source} writes out no operator expansions")
        return 0
    for r in rows:
        print(f"expansion {r['key']}: {r['operator']} ({r['latex'] or r['operator']}) at "
              f"{r['occurrence'] or '(no occurrence with that number)'}")
        if r["formula"]:
            print(f"  formula: {r['formula']}")
        if r["description"]:
            print(f"  {r['description']}")
        if r["error"]:
            print(f"  the expansion does not decode: {r['error']}", file=sys.stderr)
            continue
        print(f"  diagram: {r['dom']} → {r['cod']}, operators {', '.join(r['operators'])}")
        if r["expansions"]:
            print(f"  it writes out {r['expansions']} expansion(s) of its own")
    return 0
