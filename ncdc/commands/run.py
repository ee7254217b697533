"""``ncdc run``: build a block's generated PyTorch module on the meta device, stream its weights
in (a weights file, a mapped checkpoint, or seeded synthetic weights), run one forward pass and
report time and peak resident memory per block."""
from __future__ import annotations

import argparse
import os
import sys

from ncdc.rank import SYNTHETIC, RankPlan, RankResult, run_rank

from .common import (
    add_block_arg,
    add_checkpoint_args,
    add_io_args,
    add_memory_arg,
    add_quant_arg,
    add_reading_arg,
    add_size_args,
    add_spec_args,
    add_weights_arg,
    bind_from_args,
    chosen_block,
    emit_json,
    load_spec,
)

DESCRIPTION = """\
Run a block (or the whole model) as its generated PyTorch module on real or synthetic weights.

The module is built on the meta device (nothing allocated), then each tensor gets its memory
and values one at a time: from a weights file keyed as ncdc params lists them (keys of an
enclosing block or the whole model are found too), from an external checkpoint through a
checkpoint map (--map, see docs/checkpoints.md), or seeded synthetic values. One forward pass
runs; the time and peak resident memory of each block are printed, and the outputs can be
written to a file. The memory preflight refuses a run that would not fit.
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("run", help="run a generated module on real or synthetic weights",
                              description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_args(p)
    add_block_arg(p, default="the whole model; for a truncated spec its complete leading part",
                  dest_help="run this block")
    add_size_args(p, default_preset="tiny")
    p.add_argument("--params", dest="source", required=True, metavar="WEIGHTS",
                   help="the weights: a .npz or .safetensors file keyed as ncdc params lists "
                        "them; with --map, a checkpoint (a .safetensors file, its "
                        "model.safetensors.index.json, or their directory); or synthetic for "
                        "seeded synthetic weights")
    add_checkpoint_args(p)
    p.add_argument("--save-params", metavar="FILE",
                   help="write the weights the module ran with to FILE (.npz or .safetensors), "
                        "keyed and laid out as ncdc params lists them")
    add_io_args(p, inputs_default="seeded random inputs")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of synthetic weights and random inputs (default: 0)")
    p.add_argument("--dtype", choices=("float32", "float64", "bfloat16"), default="float32",
                   metavar="DTYPE",
                   help="floating dtype of the module: float32, float64 or bfloat16 (default: "
                        "float32)")
    p.add_argument("--depth", type=int, default=2, metavar="N",
                   help="report blocks down to this depth of submodules (default: 2)")
    p.add_argument("--stand-in", action="store_true",
                   help="use seeded stand-ins for data the spec leaves to the user (E_cmp, "
                        "alpha) when the weights lack it")
    p.add_argument("--nproc", type=int, default=1, metavar="N",
                   help="run on N local processes (gloo on CPU, NCCL when each has a GPU): the "
                        "routed experts split over the ranks, the other weights sharded with "
                        "FSDP2 (weights held in a storage format by --weights: whole on every "
                        "rank, experts still split), each rank loading only its part; the "
                        "inputs' leading batch dim "
                        "(if they have one) split over the ranks; rank 0 reports and writes the "
                        "outputs (default: 1)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="with --nproc: stop every rank and fail when the run takes longer "
                        "(default: 600); a rank that stops responding (no heartbeat for "
                        "min(SECONDS, 60) s: stopped or hung) fails it sooner")
    p.add_argument("--force-nproc", action="store_true",
                   help="allow --nproc beyond the machine's CPU count")
    p.add_argument("--debug", action="store_true",
                   help="with --nproc: when a rank fails, print its traceback before the "
                        "one-line error")
    add_quant_arg(p, help="exact: no rounding; emulate: round as the quantised formats do "
                          "(default: exact)")
    p.add_argument("--strict", action="store_true",
                   help="fail when the --params file has keys this block does not use or "
                        "metadata (spec, binding, quant mode, version) that differs from this "
                        "run, or the --inputs file has keys that are not inputs")
    add_reading_arg(p)
    add_memory_arg(p)
    add_weights_arg(p)
    p.set_defaults(run=run)


def _numpy(t):
    import torch

    t = t.detach().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.to(torch.float32)
    return t.numpy()


def write_outputs(path, res: RankResult, slot_labels: dict | None = None) -> None:
    """``out0, live0, ...`` and ``tape/KEY`` to an ``.npz`` file (as ``ncdc eval --out``)."""
    import numpy as np

    from .output import save_npz

    payload = {}
    for k, (v, live) in enumerate(zip(res.outputs, res.lives, strict=False)):
        a = _numpy(v)
        payload[f"out{k}"] = a
        payload[f"live{k}"] = np.ones(a.shape, bool) if live is None else \
            np.broadcast_to(_numpy(live).astype(bool), a.shape)
    for key, v in res.tape.items():
        payload[f"tape/{(slot_labels or {}).get(key, key)}"] = _numpy(v)
    save_npz(path, payload)


def _preflight(morphism, env, args) -> None:
    """Refuse before allocating when the module (held at the dtype's width, or in the storage
    formats of --weights where the module holds them) and its largest activations would not
    fit."""
    from ncdc.interpreter.storage_policy import StoragePolicy
    from ncdc.preflight import check_budget, estimate, parse_size

    fmt = None if args.dtype == "float64" else args.dtype
    policy = StoragePolicy.parse(args.weights)
    if policy.rules:
        def held(p):  # the policy's format where a rule names the array, else the dtype
            return policy.format_for(p.name) or fmt
    else:
        held = fmt
    est = estimate(morphism, env, held=held)
    avail = (2**63, "NCDC_NO_PREFLIGHT=1") if os.environ.get("NCDC_NO_PREFLIGHT") == "1" \
        else None
    limit = parse_size(args.max_memory) if args.max_memory else None
    check_budget(est, command="run", max_memory=limit, available=avail)


def _check_source_path(args) -> None:
    from ncdc.ir.errors import UsageError

    from .common import input_path, map_path

    if args.source == SYNTHETIC:
        if args.map:
            raise UsageError("--map needs a checkpoint, not --params synthetic")
        return
    if args.map:
        map_path(args.map)
        if not os.path.exists(args.source):
            raise UsageError(f"--params {args.source!r}: no such file or directory")
        return
    input_path(args.source, "--params", (".npz", ".safetensors"))


def _strict(args, meta, morphism, env, model_specs) -> None:
    """``--strict``: the file problems ``eval --strict`` refuses, read from the files' headers
    (no tensor data): unused keys and differing metadata of --params, unused keys of --inputs."""
    from ncdc.checkpoint.files import header_of
    from ncdc.checkpoint.keys import resolve
    from ncdc.interpreter.weights import compare_metadata
    from ncdc.ir.params import param_specs

    from .common import file_problems

    if args.source != SYNTHETIC and not args.map:
        names, found = header_of(args.source)
        problems = compare_metadata(found, meta)
        key_map, _ = resolve(param_specs(morphism, env), names, model_specs, args.key_prefix)
        extra = sorted(set(names) - set(key_map.values()))
        if extra:
            problems.append(f"{len(extra)} key(s) not used by this block: "
                            + ", ".join(repr(k) for k in extra[:5])
                            + (" ..." if len(extra) > 5 else ""))
        file_problems(args, args.source, problems)
    if args.inputs:
        names, _ = header_of(args.inputs)
        n = len(morphism.dom)
        known = {f"{p}{k}" for k in range(n) for p in ("in", "arr_", "live")}
        extra = sorted(set(names) - known)
        if extra:
            file_problems(args, args.inputs, [f"{len(extra)} key(s) not used by this block: "
                                              + ", ".join(repr(k) for k in extra[:5])])


def _check_processes(args) -> None:
    """``--nproc`` from 1 to the CPU count (beyond it only with ``--force-nproc``) and a
    positive, finite ``--timeout``."""
    import math

    from ncdc.ir.errors import UsageError

    if args.nproc < 1:
        raise UsageError(f"--nproc {args.nproc}: at least one process")
    cpus = os.cpu_count() or 1
    if args.nproc > cpus and not args.force_nproc:
        raise UsageError(f"--nproc {args.nproc}: more processes than this machine's {cpus} "
                         "CPU(s); add --force-nproc to run them anyway")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UsageError(f"--timeout {args.timeout:g}: a positive number of seconds")


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def run(args) -> int:
    from ncdc.ir.errors import UsageError

    spec = load_spec(args)
    _check_source_path(args)
    if args.seed < 0:
        raise UsageError(f"--seed {args.seed}: a seed is a whole number from 0")
    if args.depth < 0:
        raise UsageError(f"--depth {args.depth}: a depth is a whole number from 0")
    binding = bind_from_args(spec, args, default_preset="tiny")
    env = binding.env
    morphism, where = chosen_block(spec, args)
    _preflight(morphism, env, args)

    def model_specs():
        from ncdc.ir.params import param_specs

        return param_specs(spec.model(), env)

    _check_processes(args)
    if args.nproc > 1 and args.save_params:
        raise UsageError("--save-params writes the weights of a one-process run: drop --nproc "
                         "(or --save-params); the file then serves --nproc N --params FILE")
    from .common import run_metadata

    meta = run_metadata(spec, binding, args.quant) if args.strict or args.save_params else None
    if args.strict:
        _strict(args, meta, morphism, env, model_specs if args.block else None)
    plan = RankPlan(morphism, env, args.source, args.map, args.key_prefix,
                    tuple(args.weights), args.dtype, args.quant, args.reading, args.seed,
                    args.stand_in, args.inputs, args.depth,
                    model_specs if args.block else None, args.nproc)
    if args.nproc > 1:
        from ncdc.distributed import run_sharded
        from ncdc.ir.errors import DistributedError
        try:
            res = run_sharded(plan, timeout=args.timeout)
        except DistributedError as exc:
            if args.debug and exc.rank_traceback:
                print(f"rank {exc.rank}'s traceback:\n{exc.rank_traceback}", file=sys.stderr)
            raise
    else:
        res = run_rank(plan, save_params=args.save_params, save_meta=meta)
    if args.out:
        write_outputs(args.out, res)
    return _report(args, where, plan, res)


def _report(args, where, plan, res: RankResult) -> int:
    import torch

    load = res.load
    outs = []
    for k, v in enumerate(res.outputs):
        x = v.detach()
        row = {"name": f"out{k}", "shape": list(x.shape), "dtype": str(x.dtype).removeprefix(
            "torch.")}
        if x.numel() and (x.is_floating_point() or x.is_complex()):
            m = x.abs().to(torch.float64) if x.is_complex() else x.to(torch.float64)
            row.update(mean=float(m.mean()), std=float(m.std()) if m.numel() > 1 else 0.0,
                       min=float(m.min()), max=float(m.max()),
                       finite=bool(torch.isfinite(m).all()))
        elif x.numel():
            row.update(min=int(x.min()), max=int(x.max()))
        outs.append(row)
    blocks = [{"block": b.name, "calls": b.calls, "seconds": b.seconds, "peak_rss": b.peak}
              for b in res.blocks]
    if args.json:
        emit_json({"block": where, "json_path": getattr(plan.morphism, "path", ""),
                   "preset": args.preset or "tiny", "dtype": args.dtype, "quant": args.quant,
                   "weights": "synthetic" if load.synthetic else args.source,
                   "key_prefix": load.prefix or None, "loaded": load.loaded,
                   "loaded_bytes": load.loaded_bytes, "module_bytes": load.module_bytes,
                   "reset": load.reset, "seconds": res.seconds, "peak_rss": res.peak,
                   "blocks": blocks, "outputs": outs})
        return 0
    src = "synthetic weights (seeded)" if load.synthetic else \
        f"{load.loaded} tensor(s) from {args.source}" + (f" through {args.map}" if args.map
                                                         else "")
    print(f"{where}: {len(plan.morphism.dom)} input(s), {len(outs)} output(s), "
          f"dtype={args.dtype}, quant={args.quant}")
    print(f"  weights: {src}; module {_mib(load.module_bytes)}"
          + (f"; keys under '{load.prefix}'" if load.prefix else ""))
    if load.reset and not load.synthetic:
        print(f"  computed by rule or initialised: {', '.join(load.reset)}")
    s = res.seconds
    print(f"  build {s['build']:.2f} s, load {s['load']:.2f} s, forward {s['forward']:.3f} s; "
          f"peak RSS {_mib(res.peak)}")
    print(f"  {'BLOCK':<48} {'CALLS':>5} {'TIME':>10} {'PEAK RSS':>14}")
    for b in res.blocks:
        name = b.name if len(b.name) <= 48 else "..." + b.name[-45:]
        print(f"  {name:<48} {b.calls:>5} {b.seconds * 1e3:>8.1f}ms {_mib(b.peak):>14}")
    for row in outs:
        stats = "  ".join(f"{n}={row[n]:.4g}" for n in ("mean", "std", "min", "max")
                          if n in row)
        if row.get("finite") is False:
            stats += "  NON-FINITE"
        print(f"  {row['name']}: shape={tuple(row['shape'])} {row['dtype']}  {stats}")
    if args.out:
        print(f"  wrote {args.out}")
    if any(r.get("finite") is False for r in outs):
        print("warning: non-finite outputs", file=sys.stderr)
    return 0
