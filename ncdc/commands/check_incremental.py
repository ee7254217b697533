"""``ncdc check --incremental``: the generated ``prefill`` and ``step`` against the interpreter's
whole-sequence outputs (:mod:`ncdc.verify.decoder_check`), block by block."""
from __future__ import annotations

import time

from .common import bind_from_args, emit_json, load_spec


def add_arguments(p) -> None:
    p.add_argument("--incremental", action="store_true",
                   help="decode instead: prefill the first --prefill tokens, then step through "
                        "the rest in calls of --chunks tokens, every position compared with "
                        "the interpreter's whole-sequence output (float64: 1e-12; emulate: "
                        "identical)")
    p.add_argument("--prefill", type=int, default=3, metavar="K",
                   help="with --incremental: tokens given to prefill (default: 3)")
    p.add_argument("--chunks", default="1,4", metavar="SIZES",
                   help="with --incremental: step sizes separated by commas, cycled (default: 1,4)")


def _chunks(text: str) -> tuple[int, ...]:
    from ncdc.ir.errors import UsageError

    try:
        out = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise UsageError(f"--chunks {text!r}: positive token counts separated by commas")
    return out


def run_incremental(args, targets) -> int:
    from ncdc.ir.errors import UsageError
    from ncdc.verify.decoder_check import TOLERANCE, check_incremental

    if args.dtype != "float64":
        raise UsageError("--incremental compares in float64 (exact: 1e-12; emulate: identical)")
    chunks = _chunks(args.chunks)
    spec = load_spec(args)
    env = bind_from_args(spec, args, default_preset="tiny").env
    from ncdc.codegen.boundary import can_be_dead
    from ncdc.ir.readings import apply_reading
    from ncdc.verify.recorded import record_block_inputs

    from .compile import target

    todo = targets(spec, args)
    recorded = {}  # the liveness the model gives a block (a window's dead slots)
    if args.reading == "faithful" and any(can_be_dead(a) for _, m, _ in todo for a in m.dom):
        recorded = record_block_inputs(target(spec, None), env)
    rows = []
    t0 = time.perf_counter()
    for label, m, _key in todo:
        masks = [live for _, live in recorded.get(id(m), ())] or None
        r = check_incremental(apply_reading(m, args.reading), env, name=label, quant=args.quant, prefill=args.prefill,
                              chunks=chunks, masks=masks)
        if r.problem.startswith("no token axis") and not args.block:
            continue  # runs per token: nothing to decode
        rows.append({"block": label, "json_path": r.path, "ok": r.ok,
                     "incremental": r.incremental, "problem": r.problem or None,
                     "max_abs": r.max_abs, "max_rel": r.max_rel, "tolerance": TOLERANCE,
                     "tokens": r.tokens, "prefill": r.prefill, "steps": list(r.chunks),
                     "state": {k: list(v) for k, v in r.state_entries.items()},
                     "interp_seconds": r.interp_s, "torch_seconds": r.torch_s})
    took = time.perf_counter() - t0
    # a block that is not incremental is reported; it fails the check when named
    bad = [r for r in rows if not r["ok"] and (r["incremental"] or args.block)]
    if args.json:
        emit_json({"ok": not bad, "preset": args.preset or "tiny", "quant": args.quant,
                   "dtype": "float64", "incremental": True, "checked": len(rows),
                   "mismatches": len(bad), "seconds": took, "results": rows})
        return 1 if bad else 0
    print(f"{'result':<15}  {'max abs':>8}  {'max rel':>8}  {'calls':>5}  {'state':<28}  block")
    for r in rows:
        status = "ok" if r["ok"] else "MISMATCH" if r["incremental"] else "not incremental"
        state = ", ".join(f"{k.rsplit('.', 1)[-1]}{v}" for k, v in r["state"].items()
                          if k != "tokens") or "-"
        print(f"{status:<15}  {r['max_abs']:8.1e}  {r['max_rel']:8.1e}  "
              f"{1 + len(r['steps']):>5}  {state[:28]:<28}  {r['block']}")
    for r in rows:
        if r["problem"] and not r["ok"]:
            print(f"{'mismatch' if r['incremental'] else 'not incremental'}: {r['block']}: "
                  f"{r['problem']}")
    print(f"{sum(r['ok'] for r in rows)} of {len(rows)} decode as the whole sequence "
          f"(prefill {args.prefill}, steps of {args.chunks}; {took:.1f} s)")
    return 1 if bad else 0


__all__ = ["add_arguments", "run_incremental"]
