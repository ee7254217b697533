"""Arguments and helpers every subcommand shares: the SPEC argument, sizes, output format."""
from __future__ import annotations

import argparse
import json
import sys

from ncdc.ir.errors import SpecError

from ..api import Spec, bundled_spec_path, load


def add_spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", default=None,
                   help="spec file (default: the bundled DeepSeek-V4.1-Flash spec, salvaged)")
    p.add_argument("--salvage", action="store_true",
                   help="recover every complete term of a truncated file")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_size_args(p: argparse.ArgumentParser, default_preset: str = "released") -> None:
    p.add_argument("--preset", default=None,
                   help=f"size preset: released | tiny | medium (default {default_preset})")
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="bind a size by name, code_form or id (repeatable)")
    p.add_argument("--constant", action="append", default=[], metavar="NAME=X",
                   help="bind a constant (epsilon, base, ...) (repeatable)")


def parse_assignments(items: list[str], what: str) -> dict[str, float | int]:
    out = {}
    for item in items:
        if "=" not in item:
            raise SpecError(f"{what} {item!r}: expected NAME=VALUE")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = int(v)
        except ValueError:
            try:
                out[k.strip()] = float(v)
            except ValueError:
                raise SpecError(f"{what} {item!r}: {v!r} is not a number") from None
    return out


def load_spec(args) -> Spec:
    """The SPEC of the command line; the bundled default is salvaged with a one-line notice."""
    if args.spec is None:
        spec = load(None)
        rep = spec.doc.salvage
        if rep is not None and not getattr(args, "json", False):
            print(f"note: bundled spec is truncated at offset {rep.cut_offset}; "
                  f"{_recovered(spec)}", file=sys.stderr)
        return spec
    return load(args.spec, salvage=args.salvage)


def _recovered(spec: Spec) -> str:
    """One line on what salvage kept, e.g. ``salvaged 117 complete blocks: Embedding, Model
    Inputs → Sliding Window Layer → Engram of Layer 1; cut inside Sliding Window Layer #2 (tag
    lost, inferred)``."""
    from ncdc.spec.summary import salvage_summary

    return salvage_summary(spec.doc).one_line() + " (`ncdc validate` lists what was cut)"


def bind_from_args(spec: Spec, args, default_preset: str = "released"):
    preset = args.preset or default_preset
    return spec.bind(preset, parse_assignments(args.size, "--size"),
                     parse_assignments(args.constant, "--constant"))


def emit_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


__all__ = [
    "add_size_args",
    "add_spec_args",
    "bind_from_args",
    "bundled_spec_path",
    "emit_json",
    "load_spec",
    "parse_assignments",
]
