"""``ncdc check``: generated PyTorch against the reference interpreter, block by block."""
from __future__ import annotations

import argparse
import shutil
import sys
import time

from .check_incremental import add_arguments as add_incremental_arguments
from .check_incremental import run_incremental
from .common import (
    add_block_arg,
    add_memory_arg,
    add_quant_arg,
    add_reading_arg,
    add_size_args,
    add_spec_args,
    add_weights_arg,
    bind_from_args,
    emit_json,
    load_spec,
)

DESCRIPTION = """\
For every distinct block (or the one named, or with --all every block site) and the whole
model, run the interpreter and the generated module on the same random inputs and parameters
and compare. Exit status 1 on any mismatch.

On a terminal one transient line on stderr shows the block being checked; the table follows on
stdout. Blocks are labelled by their chain of titles, a title repeated among its siblings marked
~k (the parameter-key form); --block accepts these labels.
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "check", help="check generated PyTorch against the interpreter",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_args(p)
    which = p.add_mutually_exclusive_group()
    add_block_arg(which, default="every distinct block and the whole model",
                  dest_help="check this block only")
    which.add_argument("--all", action="store_true",
                       help="every block site, not only one per distinct body")
    which.add_argument("--expansions", action="store_true",
                       help="instead: each operator expansion a viewer export writes out "
                            "(auxiliary.expansions) against the operator it defines, the "
                            "interpreter run on both with the same random inputs")
    add_size_args(p, default_preset="tiny")
    add_reading_arg(p)
    add_memory_arg(p)
    add_quant_arg(p, help="exact: no rounding; emulate: round as the quantised formats do, "
                          "in both the interpreter and the generated module (default: exact)")
    p.add_argument("--dtype", choices=("float64", "float32", "bfloat16", "float16"),
                   default="float64", metavar="DTYPE",
                   help="torch dtype; float64: relative tolerance 1e-10; narrower dtypes: "
                        "inputs and weights rounded to it on both sides, each block fed the "
                        "inputs the model gives it, tolerance estimated per block from the "
                        "dtype (ncdc/verify/tolerance.py); emulate: identical (default: float64)")
    add_weights_arg(p)
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="random draws per block (default: 1)")
    add_incremental_arguments(p)
    p.set_defaults(run=run)


def targets(spec, args):
    """(label, morphism, cache key) to check, in spec order."""
    from ncdc.codegen.fingerprint import structural_key
    from ncdc.naming import named_blocks

    if args.block:
        site = spec.site(args.block)
        return [(spec.label(site), site.node, None)]
    cache: dict = {}
    out, seen = [], set()
    for b in named_blocks(spec.data):
        key = structural_key(b.site.node, cache)
        if not args.all and key in seen:
            continue
        seen.add(key)
        out.append((b.label, b.site.node, key))
    whole = spec.model()
    out.append(("(whole model" + (", salvaged prefix)" if spec.truncated else ")"), whole, None))
    return out


def _shapes(objs, env) -> list[list[int]] | None:
    try:
        return [list(env.sizes(a.shape)) for a in objs]
    except Exception:  # noqa: BLE001 - an unbound size is the check's own problem
        return None


def _dims(shapes) -> str:
    if shapes is None:
        return "?"
    return " ".join("x".join(map(str, s)) or "()" for s in shapes)


class Progress:
    """One transient line on stderr when it is a terminal; nothing otherwise."""

    def __init__(self, total: int):
        self.total = total
        self.on = sys.stderr.isatty()

    def show(self, k: int, label: str) -> None:
        if not self.on:
            return
        width = shutil.get_terminal_size((80, 20)).columns - 1
        text = f"[{k}/{self.total}] {label}"
        if len(text) > width:
            text = text[: max(0, width - 3)] + "..."
        sys.stderr.write("\r\033[K" + text)
        sys.stderr.flush()

    def done(self) -> None:
        if self.on:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _fed(recorded: dict, m, args) -> dict:
    """What the model passes into ``m``: its liveness always (a window's dead slots), its
    values in a narrower dtype (ncdc/verify/recorded.py)."""
    got = recorded.get(id(m))
    if got is None:
        return {}
    out = {"masks": [live for _, live in got]}
    if args.dtype != "float64":
        out["inputs"] = [values for values, _ in got]
    return out


def _fmt(x: float) -> str:
    return f"{x:.1e}"


def table(rows: list[dict]) -> list[str]:
    """The result table: fixed-width numbers first, shapes, then the full block label."""
    sw = max([len(r["shapes"]) for r in rows] + [6])
    header = (f"{'result':<8}  {'max abs':>8}  {'max rel':>8}  {'interp':>9}  {'torch':>9}  "
              f"{'shapes':<{sw}}  block")
    lines = [header]
    for r in rows:
        lines.append(f"{'ok' if r['ok'] else 'MISMATCH':<8}  {_fmt(r['max_abs']):>8}  "
                     f"{_fmt(r['max_rel']):>8}  {r['interp_seconds'] * 1e3:7.1f}ms  "
                     f"{r['torch_seconds'] * 1e3:7.1f}ms  {r['shapes']:<{sw}}  {r['block']}")
    return lines


def run(args) -> int:
    from ncdc.ir.errors import UsageError
    from ncdc.verify.check import TOLERANCE, ModuleCache, check_morphism

    if args.seeds < 1:
        raise UsageError(f"--seeds {args.seeds}: at least one draw per block")
    from ncdc.interpreter.storage_policy import StoragePolicy

    policy = StoragePolicy.parse(args.weights)
    if args.expansions:
        from .expansions import run_check

        return run_check(args)
    if args.incremental:
        return run_incremental(args, targets)
    spec = load_spec(args)
    binding = bind_from_args(spec, args, default_preset="tiny")
    env = binding.env
    todo = targets(spec, args)
    from ncdc.preflight import require_each

    require_each([m for _, m, _ in todo], binding.env, command="check",
                 max_memory=args.max_memory, torch_bytes=8 if args.dtype == "float64" else 4)
    cache = ModuleCache()
    from ncdc.codegen.boundary import can_be_dead
    from ncdc.verify.recorded import record_block_inputs

    from .compile import target

    recorded = {}  # recorded on the model under the same reading
    if args.dtype != "float64" or any(can_be_dead(a) for _, m, _ in todo for a in m.dom):
        recorded = record_block_inputs(target(spec, None), binding.env, reading=args.reading)
    rows = []
    t0 = time.perf_counter()
    if not args.json:
        print(f"checking {len(todo)} morphism(s) at preset {args.preset or 'tiny'}, "
              f"{args.quant} mode, {args.dtype}", file=sys.stderr)
    progress = Progress(len(todo)) if not args.json else None
    try:
        for k, (label, m, key) in enumerate(todo, 1):
            if progress:
                progress.show(k, label)
            r = check_morphism(m, env, name=label, quant=args.quant, dtype=args.dtype,
                               seeds=args.seeds, cache=cache, key=key, reading=args.reading,
                               weights=policy if policy.rules else None,
                               **_fed(recorded, m, args))
            dom, cod = _shapes(m.dom, env), _shapes(m.cod, env)
            rows.append({"block": label, "json_path": r.path, "ok": r.ok,
                         "problem": r.problem or None, "max_abs": r.max_abs,
                         "max_rel": r.max_rel,
                         # relative tolerance: fixed in float64, estimated per block otherwise
                         "tolerance": r.tolerance or TOLERANCE.get(args.dtype),
                         "error_estimate": r.error_estimate, "interp_seconds": r.interp_s,
                         "torch_seconds": r.torch_s, "dom": dom, "cod": cod,
                         "signature": r.shapes,
                         "shapes": f"{_dims(dom)} -> {_dims(cod)}".strip()})
    finally:
        if progress:
            progress.done()
    bad = [r for r in rows if not r["ok"]]
    took = time.perf_counter() - t0
    if args.json:
        emit_json({"ok": not bad, "preset": args.preset or "tiny", "quant": args.quant,
                   "dtype": args.dtype, "checked": len(rows), "mismatches": len(bad),
                   "seconds": took,
                   "results": [{k: v for k, v in r.items() if k != "shapes"} for r in rows]})
        return 1 if bad else 0
    print("\n".join(table(rows)))
    for r in bad:
        print(f"mismatch: {r['block']}: {r['problem']}")
    print(f"{len(rows) - len(bad)} of {len(rows)} agree ({took:.1f} s)"
          + ("" if not bad else f"; {len(bad)} mismatch(es)"))
    return 1 if bad else 0
