"""The ``ncdc`` command line. Each subcommand lives in ``ncdc/commands/<name>.py`` and provides
``add_parser(subparsers)`` and ``run(args) -> int``."""
from __future__ import annotations

import argparse
import importlib
import sys

from ncdc.ir.errors import SpecError, SpecFormatError, UsageError

COMMANDS = ("validate", "show", "blocks", "params", "graph", "eval", "compile", "check")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ncdc", description="the neural-circuit-diagram compiler")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"ncdc.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"ncdc.commands.{name}":
                raise
            continue
        mod.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # spec text may hold lone surrogates
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):
            pass
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        args = parser.parse_args(["check"] + (argv or []))
    try:
        return int(args.run(args) or 0)
    except (SpecFormatError, UsageError) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except SpecError as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except MemoryError as exc:  # numpy's _ArrayMemoryError included
        print(f"error: out of memory: {_one_line(exc) or 'an allocation failed'} (use a "
              "smaller preset or fewer tokens)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _one_line(exc) -> str:
    """An error message on one line, lone surrogates escaped so printing never fails."""
    text = " ".join(str(exc).split())
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


if __name__ == "__main__":
    sys.exit(main())
