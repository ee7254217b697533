"""``ncdc eval``: evaluate a block (or the whole model) with the numpy reference interpreter."""
from __future__ import annotations

import argparse
import sys
import time

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
from .common import file_problems as _warn
from .common import run_metadata as _metadata

DESCRIPTION = """\
Evaluate a block (or the whole model) with the numpy reference interpreter.

Random inputs of the right shapes and datatypes are drawn when none are given (naturals below
their bound), as are the tape slots the block reads before writing. Prints each output's array
type, shape, dtype, live fraction and mean/std/min/max over its live positions, the time, and
every seeded stand-in used.
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("eval", help="evaluate a block with the numpy interpreter",
                              description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_args(p)
    add_size_args(p, default_preset="tiny")
    add_block_arg(p, default="the whole model; for a truncated spec its complete leading part",
                  dest_help="evaluate this block")
    add_quant_arg(p, help="exact: no rounding; emulate: round as the quantised formats do "
                          "(interpreter/QUANT_POLICY.md) (default: exact)")
    p.add_argument("--params", metavar="FILE",
                   help="parameters, .npz or .safetensors, keyed as ncdc params lists them, "
                        "from this block or any block around it (default: seeded "
                        "initialisation); with --map, an external checkpoint")
    add_checkpoint_args(p)
    p.add_argument("--save-params", metavar="FILE", help="write the parameters used to FILE")
    p.add_argument("--tape", metavar="FILE",
                   help="tape slots read before written, FILE.npz keyed by slot label or uid")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of inputs and initialisation (default: 0)")
    p.add_argument("--stand-in", action="store_true",
                   help="use seeded stand-ins for data the spec leaves to the user (E_cmp, "
                        "alpha)")
    add_io_args(p, inputs_default="seeded random inputs")
    p.add_argument("--rms", action="store_true",
                   help="also print the activation RMS of every block's outputs")
    p.add_argument("--strict", action="store_true",
                   help="fail (instead of warning) when a --params/--inputs/--tape file has "
                        "unused keys, NaN or infinite values, or metadata (spec, binding, "
                        "quant mode, version) that differs from this run")
    add_reading_arg(p)
    add_memory_arg(p)
    add_weights_arg(p)
    p.set_defaults(run=run)


def _read_npz(path) -> dict:
    from ncdc.interpreter.weights import read_npz

    return read_npz(path)


def _input_keys(n: int) -> set:
    return {f"{p}{k}" for k in range(n) for p in ("in", "arr_", "live")}


def _inputs(path, n: int, data=None) -> list:
    from ncdc.ir.errors import EvaluationError

    data = _read_npz(path) if data is None else data
    out = []
    for k in range(n):
        for name in (f"in{k}", f"arr_{k}"):
            if name in data:
                x = data[name]
                break
        else:
            raise EvaluationError(f"{path}: no array in{k} (input {k} of {n})")
        live = data.get(f"live{k}")
        out.append(x if live is None else (x, live.astype(bool)))
    return out


def _stats(v, arr) -> dict:
    import numpy as np

    vals, live = v.values, v.live
    sel = vals if live is None else vals[live]
    frac = 1.0 if live is None else float(live.mean()) if live.size else 1.0
    row = {"type": str(arr), "shape": list(vals.shape), "dtype": str(vals.dtype),
           "live": frac}
    if sel.size:
        s = sel.astype(np.complex128 if np.iscomplexobj(sel) else np.float64)
        mag = np.abs(s) if np.iscomplexobj(s) else s
        row.update(mean=complex(s.mean()) if np.iscomplexobj(s) else float(s.mean()),
                   std=float(mag.std()), min=float(mag.min()), max=float(mag.max()),
                   finite=bool(np.isfinite(s).all()))
    return row


def _fmt(x) -> str:
    if isinstance(x, complex):
        return f"{x.real:.4g}{x.imag:+.4g}j"
    return f"{x:.4g}"


def _load(args, spec, morphism, env):
    """The --params weights keyed by the block's keys, and the key prefix they were under."""
    from ncdc.checkpoint.interp import interpreter_params
    from ncdc.ir.params import param_specs

    def model_specs():
        return param_specs(spec.model(), env)

    return interpreter_params(morphism, env, args.params, args.map,
                              model_specs=model_specs if args.block else None,
                              prefix=args.key_prefix)


def run(args) -> int:  # noqa: C901 - one branch per command-line option
    import numpy as np

    from ncdc import interpreter
    from ncdc.interpreter.storage_policy import weights_params
    from ncdc.interpreter.weights import audit, save_params
    from ncdc.ir.errors import UsageError
    from ncdc.preflight import require

    from .output import save_npz, write_output

    spec = load_spec(args)
    if args.seed < 0:
        raise UsageError(f"--seed {args.seed}: a seed is a whole number from 0")
    binding = bind_from_args(spec, args, default_preset="tiny")
    env = binding.env
    morphism, where = chosen_block(spec, args)
    require(morphism, env, command="eval", max_memory=args.max_memory)
    loaded, prefix = _load(args, spec, morphism, env) if args.params else (None, "")
    meta = _metadata(spec, binding, args.quant) if args.params or args.save_params else None
    if prefix and not args.json:
        print(f"note: {args.params}: the block's keys are under '{prefix}'", file=sys.stderr)
    if loaded is not None and not args.map:
        from ncdc.interpreter.weights import compare_metadata

        _warn(args, args.params, compare_metadata(loaded.metadata, meta))
    params, stored = weights_params(morphism, env, loaded, args.weights, seed=args.seed,
                                    stand_in=args.stand_in)
    run_ = interpreter.interpret(morphism, env, params=params, quant=args.quant,
                                 stand_in=args.stand_in, seed=args.seed, reading=args.reading)
    if loaded is not None:
        _warn(args, args.params, audit(loaded, run_.params))
    if args.save_params:
        from ncdc.interpreter.weights import storage_of

        storage = {p.key: storage_of(p.datatype) for p in run_.param_specs}
        write_output(args.save_params,
                     lambda tmp: save_params(run_.params, tmp, storage, meta), "--save-params")
    if args.inputs:
        data = _read_npz(args.inputs)
        _warn(args, args.inputs, audit(data, _input_keys(len(run_.dom))))
        inputs = _inputs(args.inputs, len(run_.dom), data)
    else:
        inputs = interpreter.random_inputs(morphism, env, args.seed)
    tape = interpreter.random_tape(morphism, env, args.seed)
    if args.tape:
        given = _read_npz(args.tape)
        _warn(args, args.tape, audit(given, given))
        tape = {int(k) if k.isdigit() else k: v for k, v in given.items()}
    rms = []

    def observe(block, titles, outs, batch):
        vals = []
        for v in outs:
            if v.live is None:
                vals.append(v.values)
            else:
                x, live = np.broadcast_arrays(v.values, v.live)
                vals.append(x[live])
        flat = np.concatenate([np.abs(np.asarray(x, dtype=np.complex128)).ravel()
                               for x in vals]) if vals else np.zeros(0)
        rms.append((" / ".join(titles), float(np.sqrt(np.mean(flat ** 2))) if flat.size
                    else None))

    t0 = time.perf_counter()
    res = run_.evaluate(*inputs, tape=tape, observer=observe if args.rms else None)
    elapsed = time.perf_counter() - t0
    rows = [_stats(v, a) for v, a in zip(res.outputs, run_.cod, strict=False)]
    if args.out:
        payload = {}
        for k, v in enumerate(res.outputs):
            payload[f"out{k}"] = v.values
            payload[f"live{k}"] = np.ones(v.values.shape, bool) if v.live is None else v.live
        labels = {uid: s.label for uid, s in run_.tape_slots.items()}
        for uid, v in res.tape.items():
            payload[f"tape/{labels.get(uid, uid)}"] = v.values
        save_npz(args.out, payload)
    if args.json:
        emit_json({"block": where, "json_path": getattr(morphism, "path", ""),
                   "preset": args.preset or "tiny", "quant": args.quant, "seconds": elapsed, "outputs": rows,
                   "stand_ins": run_.stand_ins, "computed": run_.params.computed,
                   "rms": [{"block": t, "rms": r} for t, r in rms]})
        return 0
    print(f"{where}: {len(run_.dom)} input(s), {len(rows)} output(s), quant={args.quant}, "
          f"{len(run_.params)} parameter array(s)")
    for k, row in enumerate(rows):
        stats = ""
        if "mean" in row:
            stats = "  ".join(f"{n}={_fmt(row[n])}" for n in ("mean", "std", "min", "max"))
            if not row["finite"]:
                stats += "  NON-FINITE"
        print(f"  out{k}: {row['type']} shape={tuple(row['shape'])} {row['dtype']} "
              f"live={row['live']:.3f}  {stats}")
    print(f"  time: {elapsed * 1e3:.1f} ms")
    if stored:
        print(f"  weights held in storage formats: {len(stored)} array(s), "
              f"{sum(b for _, _, b in stored):,} bytes")
    for key in run_.params.computed:
        print(f"  computed by rule: {key}")
    for key in run_.stand_ins:
        print(f"  stand-in (seeded, not real data): {key}")
    if args.rms:
        print("  activation RMS of each block's outputs:")
        for title, r in rms:
            print(f"    {'-' if r is None else format(r, '10.4g'):>10}  {title}")
    if any(not row.get("finite", True) for row in rows):
        print("warning: non-finite outputs", file=sys.stderr)
    return 0
