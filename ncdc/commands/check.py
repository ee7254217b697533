"""``ncdc check``: generated PyTorch against the reference interpreter, block by block."""
from __future__ import annotations

import sys
import time

from .common import add_size_args, add_spec_args, bind_from_args, emit_json, load_spec


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "check", help="check generated PyTorch against the interpreter",
        description="For every distinct block (or the one named, or --all block sites) and the "
                    "whole model, run the interpreter and the generated module on the same "
                    "random inputs and parameters and compare. Exit status 1 on any mismatch.")
    add_spec_args(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--block", metavar="B", help="check one block (title or JSON path)")
    which.add_argument("--all", action="store_true",
                       help="every block site (not only one per distinct body)")
    add_size_args(p, default_preset="tiny")
    p.add_argument("--quant", choices=("exact", "emulate"), default="exact")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="torch dtype (tolerance 1e-10 / 1e-5 relative; emulate: identical)")
    p.add_argument("--seeds", type=int, default=1, metavar="N", help="random draws per block")
    p.set_defaults(run=run)


def targets(spec, args):
    """(name, morphism, cache key) to check, in spec order."""
    from ncdc.codegen.fingerprint import structural_key

    from .compile import target

    if args.block:
        site = spec.site(args.block)
        return [(" / ".join(site.titles) or site.path, site.node, None)]
    cache: dict = {}
    out, seen = [], set()
    for site in spec.blocks():
        key = structural_key(site.node, cache)
        if not args.all and key in seen:
            continue
        seen.add(key)
        out.append((" / ".join(site.titles), site.node, key))
    whole = target(spec, None)
    out.append(("(whole model" + (", salvaged prefix)" if spec.truncated else ")"), whole, None))
    return out


def _fmt(x: float) -> str:
    return f"{x:.1e}"


def run(args) -> int:
    from ncdc.codegen.check import ModuleCache, check_morphism
    from ncdc.ir.errors import UsageError

    if args.seeds < 1:
        raise UsageError(f"--seeds {args.seeds}: at least one draw per block")
    spec = load_spec(args)
    binding = bind_from_args(spec, args, default_preset="tiny")
    todo = targets(spec, args)
    cache = ModuleCache()
    results = []
    t0 = time.perf_counter()
    width = min(56, max(len(name) for name, _, _ in todo))
    if not args.json:
        print(f"checking {len(todo)} morphism(s) at preset {args.preset or 'tiny'}, "
              f"{args.quant} mode, {args.dtype}", file=sys.stderr)
        print(f"{'block':{width}}  {'shapes':24}  {'max abs':>8} {'max rel':>8} {'interp':>8} "
              f"{'torch':>8}  result")
    for k, (name, m, key) in enumerate(todo, 1):
        r = check_morphism(m, binding.env, name=name, quant=args.quant, dtype=args.dtype,
                           seeds=args.seeds, cache=cache, key=key)
        results.append(r)
        if not args.json:
            label = name if len(name) <= width else "..." + name[-(width - 3):]
            status = "ok" if r.ok else "MISMATCH: " + r.problem
            dims = r.dims if len(r.dims) <= 24 else r.dims[:21] + "..."
            print(f"{label:{width}}  {dims:24}  {_fmt(r.max_abs):>8} {_fmt(r.max_rel):>8} "
                  f"{r.interp_s * 1e3:7.1f}ms {r.torch_s * 1e3:7.1f}ms  {status}", flush=True)
            print(f"  [{k}/{len(todo)}] {r.shapes}", file=sys.stderr, flush=True)
    bad = [r for r in results if not r.ok]
    took = time.perf_counter() - t0
    if args.json:
        emit_json({"ok": not bad, "results": [r.__dict__ for r in results]})
    else:
        print(f"{len(results) - len(bad)} of {len(results)} agree ({took:.1f} s)"
              + ("" if not bad else f"; {len(bad)} mismatch(es)"))
    return 1 if bad else 0
