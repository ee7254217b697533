"""``ncdc validate``: every problem of a spec in one pass."""
from __future__ import annotations

import argparse
import sys

from .common import (
    add_size_args,
    add_spec_args,
    check_paths,
    emit_json,
    error_json,
    parse_assignments,
)

DESCRIPTION = """\
List every problem of a spec in one pass: severity, code, JSON path, block titles, axes.

Exit status: 0 valid (no error; warnings and info allowed), 1 invalid (errors, including a spec
that does not decode), 2 unreadable (not a JSON document or not a spec envelope, or a bad
command-line binding). A truncated file is unreadable unless --salvage is given (the bundled
default is always salvaged); salvaged, it is valid when what was recovered is.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("validate", help="check a spec and list every problem",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_args(p)
    add_size_args(p, default_preset="none: sizes are not checked")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also print the info diagnostics (listed by count otherwise)")
    p.set_defaults(run=run)


def _decode_problems(exc):
    from ncdc.ir.errors import Diagnostic

    problems = getattr(exc, "problems", None) or [exc]
    out = []
    for p in problems:
        msg = p.message
        if p is exc and len(problems) > 1:
            msg = msg.split(" (and ")[0]
        out.append(Diagnostic("error", "decode", msg, p.json_path, p.titles,
                              ()))
    return out


def _binding(spec, args):
    if args.preset in (None, "none") and not args.size and not args.constant:
        return None
    preset = None if args.preset in (None, "none") else args.preset
    if preset is None and args.size:
        preset = "released"  # sizes given alone complete the values the spec states
    return spec.bind(preset,
                     parse_assignments(args.size, "--size"),
                     parse_assignments(args.constant, "--constant"))


def _unreadable(args, source: str, exc) -> int:
    if args.json:
        emit_json({"source": source, "readable": False, "valid": False,
                   **error_json(exc, 2)})
    else:
        print(f"error: {exc}", file=sys.stderr)
    return 2


def run(args) -> int:
    from ncdc.ir.errors import BindingError, SpecError, SpecFormatError
    from ncdc.spec.summary import salvage_summary
    from ncdc.spec.validate import counts, counts_by_code

    from ..api import load

    source = args.spec or "(bundled spec)"
    check_paths(args)
    try:
        spec = load(args.spec, salvage=args.salvage or args.spec is None,
                    max_bytes=args.max_spec_bytes)
    except SpecFormatError as exc:
        return _unreadable(args, source, exc)
    except SpecError as exc:
        diags = _decode_problems(exc)
        if args.json:
            emit_json({"source": source, "readable": True, "valid": False,
                       "counts": counts(diags), "diagnostics": [d.as_dict() for d in diags],
                       "salvage": None})
        else:
            for d in diags:
                print(d)
            print(f"{source}: invalid: the spec does not decode ({len(diags)} problem(s))")
        return 1
    try:
        binding = _binding(spec, args)
    except (BindingError, SpecError) as exc:
        return _unreadable(args, source, exc)
    diags = spec.validate(binding)
    summary = salvage_summary(spec.doc)
    n = counts(diags)
    valid = n["error"] == 0
    if args.json:
        emit_json({"source": spec.source, "readable": True, "envelope": spec.doc.envelope,
                   "valid": valid, "counts": n, "by_code": counts_by_code(diags),
                   "diagnostics": [d.as_dict() for d in diags],
                   "salvage": summary.as_dict() if summary.salvaged or args.salvage
                   else None})
        return 0 if valid else 1
    print(f"{spec.source} ({spec.doc.envelope})")
    for d in diags:
        if d.severity != "info" or args.verbose:
            print(d)
    if summary.salvaged:
        _print_salvage(summary)
    if summary.salvaged or args.salvage:
        _print_bodiless(summary)
    hidden = "" if args.verbose or not n["info"] else " (-v lists the info)"
    verdict = "valid" if valid else "INVALID"
    print(f"{verdict}: {n['error']} error(s), {n['warning']} warning(s), {n['info']} info"
          f"{hidden}")
    return 0 if valid else 1


def _print_salvage(s) -> None:
    if s.cut_offset is not None:
        print(f"salvage: the text is cut at offset {s.cut_offset} (line {s.cut_line}, column "
              f"{s.cut_column}), inside {s.cut_path or '<root>'}")
        if s.trailing_garbage:
            print(f"  trailing text ignored: {s.trailing_garbage!r}")
    print(f"  {s.one_line()}")
    if s.cut:
        print(f"  blocks cut ({len(s.cut)}):")
        for c in s.cut:
            print(f"    - {c.describe()}")
    if s.repository_only:
        print(f"  block titles with no body in the data, only tags in the repository "
              f"({len(s.repository_only)}):")
        print("    " + "; ".join(e.title for e in s.repository_only))


def _print_bodiless(s) -> None:
    """The repository's tags no block of the data carries, by block title (spec.summary)."""
    n = sum(len(g.uids) for g in s.bodiless)
    if not n:
        print("  block tags with no body: none (every tag of the repository labels a block)")
        return
    past = sum(g.past_cut for g in s.bodiless)
    where = f", {past} written past the last tag the data uses" if past else ""
    print(f"  block tags with no body ({n} tags of {len(s.bodiless)} block titles{where}, in "
          "repository order):")
    for g in s.bodiless:
        print(f"    - {g.describe()}")
