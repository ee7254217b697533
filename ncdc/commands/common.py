"""Arguments and helpers every subcommand shares: the SPEC argument, sizes, output format."""
from __future__ import annotations

import argparse
import json
import math
import os
import stat
import sys

from ncdc.ir.errors import BindingError, SpecError, UsageError

from ..api import Spec, bundled_spec_path, load


def add_spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", default=None,
                   help="spec file (default: the bundled DeepSeek-V4.1-Flash spec, salvaged)")
    p.add_argument("--salvage", action="store_true",
                   help="recover every complete term of a truncated file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--max-spec-bytes", type=int, default=None, metavar="N",
                   help="refuse spec files larger than N bytes (default 256 MiB)")


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
            raise UsageError(f"{what} {item!r}: expected NAME=VALUE")
        k, v = item.split("=", 1)
        v = v.strip()
        try:
            out[k.strip()] = int(v) if len(v) <= 30 else float(v)
        except ValueError:
            try:
                out[k.strip()] = float(v)
            except ValueError:
                raise UsageError(f"{what} {item!r}: {v!r} is not a number") from None
        if isinstance(out[k.strip()], float) and not math.isfinite(out[k.strip()]):
            raise UsageError(f"{what} {item!r}: {v!r} is not a finite number")
    return out


#: Files a command reads or writes, by argument name: (direction, extensions); ``output``
#: depends on the command.
PATH_ARGS = {
    "params": ("in", (".npz", ".safetensors")),
    "inputs": ("in", (".npz",)),
    "tape": ("in", (".npz",)),
    "save_params": ("out", (".npz", ".safetensors")),
    "out": ("out", (".npz",)),
}
OUTPUT_EXTS = {"compile": (".py",), "graph": (".dot", ".gv", ".graphml")}


def check_paths(args) -> None:
    """Every path argument of ``args`` checked before any work: inputs are readable regular
    files, outputs go to an existing directory and are not directories, and each keeps an
    extension its format allows. A problem is a :class:`UsageError` (exit 2, one line)."""
    spec = getattr(args, "spec", None)
    if spec is not None:
        input_path(spec, "SPEC", None)
    for name, (direction, exts) in PATH_ARGS.items():
        path = getattr(args, name, None)
        if path:
            flag = "--" + name.replace("_", "-")
            (input_path if direction == "in" else output_path)(path, flag, exts)
    out = getattr(args, "output", None)
    if out:
        output_path(out, "--output", OUTPUT_EXTS.get(getattr(args, "command", ""), None))


def _ext_ok(path: str, flag: str, exts) -> None:
    if exts and os.path.splitext(path)[1].lower() not in exts:
        raise UsageError(f"{flag} {path!r}: the file name must end in {' or '.join(exts)}")


def input_path(path, flag: str, exts=None) -> None:
    """``path`` is an existing, readable file (a regular file or a stream such as a pipe)."""
    path = os.fspath(path)
    _ext_ok(path, flag, exts)
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(f"{flag} {path!r}: cannot read it: {why}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{flag} {path!r} is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{flag} {path!r}: permission denied")


def output_path(path, flag: str, exts=None) -> None:
    """``path`` can be written: its directory exists and it is not itself a directory."""
    path = os.fspath(path)
    _ext_ok(path, flag, exts)
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a directory; name a file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path!r}: the directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} {path!r}: permission denied")


def load_spec(args) -> Spec:
    """The SPEC of the command line; the bundled default is salvaged with a one-line notice.
    Every path argument is checked first (:func:`check_paths`)."""
    check_paths(args)
    limit = getattr(args, "max_spec_bytes", None)
    if args.spec is None:
        spec = load(None)
        rep = spec.doc.salvage
        if rep is not None and not getattr(args, "json", False):
            print(f"note: bundled spec is truncated at offset {rep.cut_offset}; "
                  f"{_recovered(spec)}", file=sys.stderr)
        return spec
    return load(args.spec, salvage=args.salvage, max_bytes=limit)


def _recovered(spec: Spec) -> str:
    """One line on what salvage kept, e.g. ``salvaged 117 complete blocks: Embedding, Model
    Inputs → Sliding Window Layer → Engram of Layer 1; cut inside Sliding Window Layer #2 (tag
    lost, inferred)``."""
    from ncdc.spec.summary import salvage_summary

    return salvage_summary(spec.doc).one_line() + " (`ncdc validate` lists what was cut)"


def bind_from_args(spec: Spec, args, default_preset: str = "released"):
    """The binding of the command line, gated: the spec is validated under it and its first
    error refuses the command (:func:`gate`)."""
    preset = args.preset or default_preset
    binding = spec.bind(preset, parse_assignments(args.size, "--size"),
                        parse_assignments(args.constant, "--constant"))
    gate(spec, binding)
    return binding


def gate(spec: Spec, binding) -> None:
    """Refuse what ``ncdc validate`` rejects: ``eval``, ``compile`` and ``check`` run the very
    validation ``validate`` reports (same binding) and raise its first error as a typed
    :class:`SpecError` (:class:`BindingError` for sizes), before any allocation."""
    errors = [d for d in spec.validate(binding) if d.severity == "error"]
    if not errors:
        return
    d = errors[0]
    more = f" (and {len(errors) - 1} more; `ncdc validate` lists them)" if len(errors) > 1 \
        else ""
    cls = BindingError if d.code == "size-invalid" else SpecError
    raise cls(f"refused: {d.code}: {d.message}{more}", d.json_path, d.titles)


def emit_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


__all__ = [
    "add_size_args",
    "add_spec_args",
    "bind_from_args",
    "bundled_spec_path",
    "check_paths",
    "emit_json",
    "gate",
    "input_path",
    "load_spec",
    "output_path",
    "parse_assignments",
]
