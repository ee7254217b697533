"""``ncdc cost``: what the model (or a block) costs, per block and in total (the report is
built by ``ncdc.commands.cost_report``; the counting rules are stated in ``ir/cost.py``)."""
from __future__ import annotations

from .common import add_block_arg, add_size_args, add_spec_args

DESCRIPTION = """\
What the model (or a block) costs, per block and in total, as formulas in the sizes and as
numbers at the binding: learned elements, elements activated per token, weight bytes at a
storage format (float32, bfloat16, mxfp8, mxfp4), FLOPs per token, the largest array one call
materialises, and the state a decoder keeps (look-back windows). Each block's figures are for
one call of that block; per token divides by the token count of its domain.
"""


def add_parser(sub) -> None:
    import argparse

    p = sub.add_parser("cost", help="parameters, bytes, FLOPs, activations, decoder state",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_args(p)
    add_size_args(p, default_preset="released")
    add_block_arg(p, default="the whole model", dest_help="only this block and the blocks inside it")
    p.add_argument("--tokens", type=int, default=None, metavar="N",
                   help="bind the token count (solves the token axis size for its free size, "
                        "e.g. b = N/2 for x = a*b)")
    p.add_argument("--weights", action="append", default=[], metavar="FORMAT",
                   help="storage format of learned weights (float32, bfloat16, mxfp8, mxfp4; "
                        "default bfloat16; --json lists every format): FORMAT for all, "
                        "PATTERN=FORMAT for the parameter keys that match a glob (first match "
                        "wins; the total counts them), or a .json/.toml file of rules")
    p.add_argument("--depth", type=int, default=None, metavar="N",
                   help="list this many block levels")
    p.add_argument("--all", action="store_true",
                   help="include annotation blocks (casts, elementwise maps)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ncdc.commands.cost_report import run as report

    return report(args)
