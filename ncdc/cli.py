"""The ``ncdc`` command line. Each subcommand lives in ``ncdc/commands/<name>.py`` and provides
``add_parser(subparsers)`` and ``run(args) -> int``.

Building the parser imports no numpy, sympy, torch or IR module (``ncdc --help`` stays fast);
each ``run`` imports what it needs. Errors are one ``error: ...`` line on stderr, or with
``--json`` one error object on stdout (``docs/json.md``). Exit status: 0 success, 1 a problem
with the spec or a failed check, 2 unreadable input or bad usage, 130 interrupted.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from ncdc import __version__

from .commands.common import emit_json, report_error

COMMANDS = ("validate", "show", "blocks", "params", "cost", "graph", "view", "eval", "compile", "check",
            "run", "export")

START = """\
start with:
  ncdc validate SPEC.json   every problem of a spec, in one pass
  ncdc check [SPEC.json]    generated PyTorch against the reference interpreter, block by block
(without SPEC.json, the bundled DeepSeek-V4.1-Flash spec is used)
"""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are a JSON error object when ``--json`` is on the
    command line."""

    json_errors = False

    def error(self, message):
        if Parser.json_errors:
            emit_json({"error": {"type": "UsageError", "message": message,
                                 "usage": self.format_usage().strip(), "exit_status": 2}})
            sys.exit(2)
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="ncdc", description="ncdc, the neural-circuit-diagram compiler: pyncd "
               "diagram specs to a validated IR, a numpy reference interpreter and PyTorch "
               "code.", epilog=START, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"ncdc {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
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
    argv = sys.argv[1:] if argv is None else list(argv)
    for stream in (sys.stdout, sys.stderr):  # spec text may hold lone surrogates
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):
            pass
    Parser.json_errors = "--json" in argv
    parser = build_parser()
    if not argv:
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0

    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # MemoryError included  # typed errors are reported, others re-raised
        status = report_error(exc, getattr(args, "json", False))
        if status is None:
            raise
        return status


if __name__ == "__main__":
    sys.exit(main())
