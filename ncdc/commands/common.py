"""Arguments and helpers every subcommand shares: the SPEC argument, block names, sizes, output
format and error reports.

Nothing here imports numpy, sympy, torch or the IR at module level: the parsers are built for
every ``ncdc --help``. The helpers that need them import them when called.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import stat
import sys

PRESET_NAMES = ("released", "tiny", "medium")


def __getattr__(name: str):
    """``UsageError`` is :class:`ncdc.ir.errors.UsageError`, imported on first use (the IR is
    not imported while parsers are built)."""
    if name == "UsageError":
        from ncdc.ir.errors import UsageError

        return UsageError
    raise AttributeError(name)


def add_spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", default=None, metavar="SPEC",
                   help="spec file (default: the bundled DeepSeek-V4.1-Flash spec, salvaged)")
    p.add_argument("--salvage", action="store_true",
                   help="recover every complete term of a truncated file")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object instead of text, errors included (schema: "
                        "docs/json.md)")
    p.add_argument("--max-spec-bytes", type=int, default=None, metavar="N",
                   help="refuse spec files larger than N bytes (default: 256 MiB)")


def add_block_arg(p, default: str = "the whole model", dest_help: str = "") -> None:
    p.add_argument("--block", default=None, metavar="BLOCK",
                   help=(dest_help or "the block to use") + f" (default: {default}); a title, "
                        "a label as ncdc check prints it, a parameter-key path or a JSON path")


def add_size_args(p: argparse.ArgumentParser, default_preset: str = "released") -> None:
    p.add_argument("--preset", default=None, metavar="PRESET",
                   help=f"size preset: {', '.join(PRESET_NAMES[:-1])} or {PRESET_NAMES[-1]} "
                        f"(default: {default_preset})")
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="bind a size by label, qualified name (k@BLOCK), code form or id:N "
                        "(repeatable)")
    p.add_argument("--constant", action="append", default=[], metavar="NAME=X",
                   help="bind a constant such as an epsilon or a base (repeatable)")


def add_reading_arg(p) -> None:
    """``--reading``: the faithful reading of the diagram, or pyncd's own torch lowering."""
    p.add_argument("--reading", choices=("faithful", "pyncd"), default="faithful",
                   metavar="READING",
                   help="faithful: each node means what the diagram says; pyncd: reproduce "
                        "pyncd's torch lowering (Elementwise as ReLU, Normalize as LayerNorm) "
                        "(default: faithful)")


def add_memory_arg(p) -> None:
    """``--max-memory``: the memory preflight's limit (see ``ncdc.preflight``)."""
    p.add_argument("--max-memory", default=None, metavar="SIZE",
                   help="refuse to start when the estimated peak memory exceeds SIZE (e.g. "
                        "2GiB, 500MB); the machine's available memory is always a limit")


def add_weights_arg(p) -> None:
    """``--weights``: the storage policy of learned weights (see
    ``ncdc.interpreter.storage_policy``)."""
    p.add_argument("--weights", action="append", default=[], metavar="FORMAT",
                   help="hold learned weights in a storage format (float32, bfloat16, mxfp8, "
                        "mxfp4): FORMAT for every key, PATTERN=FORMAT for keys matching a glob "
                        "(first match wins; repeatable), or a .json/.toml file of rules")


def add_checkpoint_args(p) -> None:
    """``--map`` and ``--key-prefix``: how the weights' names become the block's keys."""
    from ncdc.checkpoint.builtin import builtin_help

    p.add_argument("--map", metavar="MAP",
                   help="checkpoint map from the checkpoint's tensor names to ncdc's parameter "
                        "keys: a .toml or .json file, or the name of a built-in map ("
                        + builtin_help() + ")")
    p.add_argument("--config", metavar="CONFIG",
                   help="a Hugging Face config.json of DeepSeek-V4: its sizes and constants "
                        "bound (over the preset; a field that disagrees with the diagram or "
                        "with --size/--constant is an error)")
    p.add_argument("--key-prefix", metavar="PREFIX",
                   help="where the block's keys start in the weights (default: found from the "
                        "block's place in the model)")


def add_io_args(p, inputs_default: str) -> None:
    """``--inputs`` and ``--out``: arrays in dom order in, outputs and the final tape out."""
    p.add_argument("--inputs", metavar="FILE",
                   help="inputs in dom order, FILE.npz with arrays in0, in1, ... (or arr_0, "
                        f"...) and optional bool masks live0, live1, ... (default: "
                        f"{inputs_default})")
    p.add_argument("--out", metavar="FILE",
                   help="write outputs (out0, live0, ...) and the final tape (tape/LABEL) to "
                        "FILE.npz")


def add_quant_arg(p, help: str) -> None:
    p.add_argument("--quant", choices=("exact", "emulate"), default="exact", metavar="MODE",
                   help=help)


def parse_assignments(items: list[str], what: str) -> dict[str, float | int]:
    """``NAME=VALUE`` items as a dict; a value that is not a finite number is a
    :class:`UsageError` (exit 2)."""
    from ncdc.ir.errors import UsageError

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
    "config": ("in", (".json",)),
}
OUTPUT_EXTS = {"compile": (".py",), "graph": (".dot", ".gv", ".graphml"),
               "view": (".html", ".htm", ".svg", ".png")}


def check_paths(args) -> None:
    """Every path argument of ``args`` checked before any work: inputs are readable regular
    files, outputs go to an existing directory and are not directories, and each keeps an
    extension its format allows. A problem is a UsageError (exit 2, one line)."""
    from ncdc.ir.errors import UsageError
    from ncdc.spec.envelope import split_address

    spec = getattr(args, "spec", None)
    if spec is not None:
        input_path(split_address(spec, os.path.exists)[0], "SPEC", None)
    for name, (direction, exts) in PATH_ARGS.items():
        path = getattr(args, name, None)
        if path == "":
            raise UsageError(f"--{name.replace('_', '-')}: an empty path names no file")
        if name == "params" and path and getattr(args, "map", None):
            map_path(args.map)
            if not os.path.exists(path):  # a checkpoint: a file, an index or a directory
                raise UsageError(f"--params {path!r}: no such file or directory")
            continue
        if path:
            flag = "--" + name.replace("_", "-")
            (input_path if direction == "in" else output_path)(path, flag, exts)
    out = getattr(args, "output", None)
    if out == "":
        raise UsageError("--output: an empty path names no file (leave -o out for standard "
                         "output)")
    if out:
        output_path(out, "--output", OUTPUT_EXTS.get(getattr(args, "command", ""), None))
    distinct_paths(args)


#: Arguments naming files a command reads, and files it writes.
INPUT_ARGS = ("spec", "params", "source", "map", "inputs", "tape", "config")
OUTPUT_ARGS = ("output", "out", "save_params")


def _flag(name: str) -> str:
    return "SPEC" if name == "spec" else "--" + {"source": "params"}.get(name, name).replace(
        "_", "-")


def distinct_paths(args) -> None:
    """No output of ``args`` is one of its inputs or another of its outputs (same file after
    symlinks, or the same path): a UsageError (exit 2) before any work."""
    from ncdc.ir.errors import UsageError

    seen = {}
    for name in INPUT_ARGS + OUTPUT_ARGS:
        path = getattr(args, name, None)
        if not isinstance(path, str) or not path or path == "synthetic" and name == "source":
            continue
        where = os.path.realpath(path)
        other = seen.get(where)
        if other is not None and other != name and name in OUTPUT_ARGS:
            raise UsageError(f"{_flag(name)} {path!r} is the same file as {_flag(other)}; "
                             "write the output elsewhere")
        seen.setdefault(where, name)


def _ext_ok(path: str, flag: str, exts) -> None:
    from ncdc.ir.errors import UsageError

    if exts and os.path.splitext(path)[1].lower() not in exts:
        raise UsageError(f"{flag} {path!r}: the file name must end in {' or '.join(exts)}")


def map_path(path) -> None:
    """``--map``: a built-in map's name, or a readable ``.toml``/``.json`` file."""
    from ncdc.checkpoint.builtin import BUILTIN, builtin_path
    from ncdc.ir.errors import UsageError

    if builtin_path(path) is not None:
        return
    if not os.fspath(path).lower().endswith((".toml", ".json")):
        raise UsageError(f"--map {path!r} names no built-in map ({', '.join(BUILTIN)}) and "
                         "is not a .toml or .json file")
    input_path(path, "--map", (".toml", ".json"))


def input_path(path, flag: str, exts=None) -> None:
    """``path`` is an existing, readable file (a regular file or a stream such as a pipe)."""
    from ncdc.ir.errors import UsageError

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
    from ncdc.ir.errors import UsageError

    path = os.fspath(path)
    _ext_ok(path, flag, exts)
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a directory; name a file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path!r}: the directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} {path!r}: permission denied")


def load_spec(args):
    """The SPEC of the command line; the bundled default is salvaged with a one-line notice.
    Every path argument is checked first (:func:`check_paths`)."""
    from ..api import load

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


def _recovered(spec) -> str:
    """One line on what salvage kept, e.g. ``salvaged 117 complete blocks: Embedding, Model
    Inputs → Sliding Window Layer → Engram of Layer 1; cut inside Sliding Window Layer #2 (tag
    lost, inferred)``."""
    from ncdc.spec.summary import salvage_summary

    return salvage_summary(spec.doc).one_line() + " (`ncdc validate` lists what was cut)"


def bind_from_args(spec, args, default_preset: str = "released"):
    """The binding of the command line, gated: the spec is validated under it and its first
    error refuses the command (:func:`gate`)."""
    preset = args.preset or default_preset
    sizes = parse_assignments(args.size, "--size")
    constants = parse_assignments(args.constant, "--constant")
    if getattr(args, "config", None):
        from ncdc.checkpoint.hfconfig import with_config

        sizes, constants = with_config(spec, args.config, preset, sizes, constants)
    binding = spec.bind(preset, sizes, constants)
    gate(spec, binding)
    return binding


def gate(spec, binding) -> None:
    """Refuse what ``ncdc validate`` rejects: ``eval``, ``compile`` and ``check`` run the very
    validation ``validate`` reports (same binding) and raise its first error as a typed
    SpecError (BindingError for sizes), before any allocation."""
    from ..api import refuse

    refuse(spec.validate(binding))


def file_problems(args, path, problems) -> None:
    """File problems: warnings on stderr, or an error under --strict."""
    from ncdc.ir.errors import EvaluationError

    if not problems:
        return
    if args.strict:
        raise EvaluationError(f"{path}: {problems[0]}" + (
            f" (and {len(problems) - 1} more)" if len(problems) > 1 else "") + " (--strict)")
    for p in problems:
        print(f"warning: {path}: {p}", file=sys.stderr)


def run_metadata(spec, binding, quant) -> dict:
    """The metadata a weights file written by this run carries, and ``--strict`` compares
    (``ncdc.interpreter.weights.file_metadata``)."""
    import hashlib

    import ncdc
    from ncdc.interpreter.weights import file_metadata
    from ncdc.spec.checks_binding import size_key

    with open(spec.source, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    syms = list(binding.env.values)
    values = {size_key(s, syms): str(v) for s, v in sorted(binding.env.values.items(),
                                                             key=lambda kv: kv[0].uid)}
    return file_metadata(digest, values, quant, ncdc.__version__)


def plain(obj):
    """``obj`` with every non-finite float as None (JSON has no NaN or infinity), tuples as
    lists and complex numbers as ``{"real": .., "imag": ..}``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, complex):
        return {"real": plain(obj.real), "imag": plain(obj.imag)}
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def emit_json(obj) -> None:
    json.dump(plain(obj), sys.stdout, indent=2, sort_keys=False, default=str, allow_nan=False)
    sys.stdout.write("\n")


def error_json(exc: BaseException, status: int) -> dict:
    """The JSON error object of an exception (``docs/json.md``)."""
    err = {"type": type(exc).__name__, "message": getattr(exc, "message", str(exc)),
           "json_path": getattr(exc, "json_path", "") or None,
           "titles": list(getattr(exc, "titles", ()) or ()), "exit_status": status}
    for k in ("offset", "line", "column"):
        if getattr(exc, k, None) is not None:
            err[k] = getattr(exc, k)
    cands = getattr(exc, "candidates", None)
    if cands is not None:
        err["candidates"] = [{"label": label, "json_path": path} for label, path in cands]
    return {"error": err}


def report_error(exc: BaseException, as_json: bool) -> int | None:
    """Report a user-facing error (stderr, or a JSON object on stdout); its exit status. None
    for an exception that is a bug, not a user's problem."""
    from ncdc.ir.errors import SpecError, SpecFormatError, UsageError

    if isinstance(exc, (SpecFormatError, UsageError)):
        status = 2
    elif isinstance(exc, SpecError):
        status = 1
    elif isinstance(exc, MemoryError):  # numpy's _ArrayMemoryError included
        status = 1
        exc = SpecError(f"out of memory: {str(exc) or 'an allocation failed'} (use a smaller "
                        "preset or fewer tokens)")
    elif isinstance(exc, OSError) and exc.filename is not None:
        status = 2
    else:
        return None
    if as_json:
        emit_json(error_json(exc, status))
    else:
        text = str(exc) if not isinstance(exc, OSError) else f"{exc.filename}: {exc.strerror}"
        print(f"error: {text}", file=sys.stderr)
    return status


def chosen_block(spec, args):
    """``(morphism, label)`` of ``--block``, or of the whole model (its complete leading part
    where the spec is truncated) without one."""
    if args.block:
        site = spec.site(args.block)
        return site.node, spec.label(site)
    morphism = spec.model()
    where = "the whole model" if morphism is spec.data else \
        f"the complete leading part of the model ({len(morphism.content)} items)"
    return morphism, where
