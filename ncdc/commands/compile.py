"""``ncdc compile``: generate a standalone PyTorch file for a spec or one of its blocks."""
from __future__ import annotations

import os
import sys
import time

from .common import add_size_args, add_spec_args, bind_from_args, load_spec


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "compile", help="generate standalone PyTorch code",
        description="Generate a standalone PyTorch module (imports only torch) for the whole "
                    "spec (its salvaged prefix when truncated) or one block.")
    add_spec_args(p)
    p.add_argument("--block", metavar="B", help="block title or JSON path (default: the model)")
    add_size_args(p, default_preset="tiny")
    p.add_argument("--quant", choices=("exact", "emulate"), default="exact",
                   help="default of the generated modules' quant switch (default exact)")
    p.add_argument("-o", "--output", metavar="FILE.py",
                   help="write the source here (default: standard output)")
    p.add_argument("--reading", choices=("faithful", "pyncd"), default="faithful",
                   help="pyncd: reproduce pyncd's torch lowering (Elementwise as ReLU, Normalize "
                        "as LayerNorm); default faithful")
    p.set_defaults(run=run)


def target(spec, block: str | None):
    """The morphism to compile: a block, or the model (its complete prefix if truncated)."""
    if block:
        return spec.block(block)
    from ncdc.interpreter import prefix

    return prefix(spec.data)


def run(args) -> int:
    from ncdc import codegen

    spec = load_spec(args)
    binding = bind_from_args(spec, args, default_preset="tiny")
    morphism = target(spec, args.block)
    t0 = time.perf_counter()
    stem = os.path.splitext(os.path.basename(spec.source))[0]
    g = codegen.generate(morphism, binding.env, quant=args.quant,
                         module_name=None if args.block else stem,
                         source_name=os.path.basename(spec.source), reading=args.reading)
    took = time.perf_counter() - t0
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(g.source)
        where = args.output
    else:
        sys.stdout.write(g.source)
        where = "standard output"
    classes = g.source.count("\nclass ")
    print(f"wrote {where}: class {g.class_name}, {classes} classes, {len(g.param_keys)} "
          f"parameters and buffers, {len(g.source.splitlines())} lines ({took:.2f} s)",
          file=sys.stderr)
    return 0
