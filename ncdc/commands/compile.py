"""``ncdc compile``: generate a standalone PyTorch file for a spec or one of its blocks."""
from __future__ import annotations

import os
import sys
import time

from .common import (
    add_block_arg,
    add_quant_arg,
    add_reading_arg,
    add_size_args,
    add_spec_args,
    add_weights_arg,
    bind_from_args,
    emit_json,
    load_spec,
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "compile", help="generate standalone PyTorch code",
        description="Generate a standalone PyTorch module (imports only torch) for the whole "
                    "spec (its salvaged prefix when truncated) or one block.")
    add_spec_args(p)
    add_block_arg(p, default="the whole model", dest_help="compile this block")
    add_size_args(p, default_preset="tiny")
    add_reading_arg(p)
    add_quant_arg(p, help="default of the generated modules' quant switch: exact or emulate "
                          "(default: exact)")
    add_weights_arg(p)
    p.add_argument("--with", dest="runtime", metavar="FEATURES", default="",
                   help="runtime the file carries besides the model, comma-separated: loader "
                        "(PARAM_KEYS, PARAM_LAYOUT, load_interpreter_params: weights keyed like "
                        "the interpreter), decoding (prefill and step), distributed (shard, "
                        "load_shard, gather_full; brings the loader), or all (default: none)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the source to FILE.py (default: standard output; with --json, "
                        "the source is in the JSON object)")
    p.set_defaults(run=run)


def target(spec, block: str | None):
    """The morphism to compile: a block, or the model (its complete prefix if truncated)."""
    if block:
        return spec.block(block)
    return spec.model()


def run(args) -> int:
    from ncdc import codegen
    from ncdc.codegen.generate import runtime_features
    from ncdc.interpreter.storage_policy import StoragePolicy
    from ncdc.ir.errors import UsageError

    policy = StoragePolicy.parse(args.weights)
    try:
        runtime = runtime_features(args.runtime)
    except ValueError as exc:
        raise UsageError(f"--with: {exc}") from None
    spec = load_spec(args)
    binding = bind_from_args(spec, args, default_preset="tiny")
    morphism = target(spec, args.block)
    t0 = time.perf_counter()
    stem = os.path.splitext(os.path.basename(spec.source))[0]
    g = codegen.generate(morphism, binding.env, quant=args.quant,
                         module_name=None if args.block else stem,
                         source_name=os.path.basename(spec.source), reading=args.reading,
                         weights=policy if policy.rules else None,
                         size_names=spec.size_names(), runtime=runtime)
    took = time.perf_counter() - t0
    if args.output:
        from .output import write_text

        write_text(args.output, g.source, "--output")
    info = {"output": args.output, "class": g.class_name,
            "classes": g.source.count("\nclass "), "parameters": len(g.param_keys),
            "lines": len(g.source.splitlines()), "seconds": took,
            "preset": args.preset or "tiny", "quant": args.quant,
            "weights": [f"{r.pattern}={r.format}" for r in policy.rules],
            "runtime": sorted(runtime)}
    if args.json:
        emit_json({**info, "source": None if args.output else g.source})
        return 0
    if not args.output:
        sys.stdout.write(g.source)
    where = args.output or "standard output"
    print(f"wrote {where}: class {info['class']}, {info['classes']} classes, "
          f"{info['parameters']} parameters and buffers, {info['lines']} lines ({took:.2f} s)",
          file=sys.stderr)
    return 0
