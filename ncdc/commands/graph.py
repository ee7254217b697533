"""``ncdc graph``: the wiring of a block as a graph file (see ``ir.graph``)."""
from __future__ import annotations

import os

from .common import (
    add_block_arg,
    add_size_args,
    add_spec_args,
    emit_json,
    load_spec,
)
from .show import optional_binding


def add_parser(sub) -> None:
    p = sub.add_parser("graph", help="write the wiring graph (.dot or .graphml)",
                       description="The wiring of a block as a graph file: boxes as nodes, "
                       "wires as edges labelled with their shapes. -o FILE.dot writes Graphviz "
                       "text, -o FILE.graphml GraphML. Sizes are symbolic unless --preset or "
                       "--size is given.")
    add_spec_args(p)
    add_size_args(p, default_preset="none: symbolic shapes")
    add_block_arg(p, default="the whole model", dest_help="the block to draw")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="output file, FILE.dot (or .gv) or FILE.graphml")
    p.set_defaults(run=run)


def _flat_clusters(g):
    """GraphML holds no nested data: each node gets its enclosing block's label and the chain
    of enclosing block paths (``cluster_path``, outermost first) as plain attributes."""
    h = g.copy()
    clusters = h.graph.pop("clusters", {})
    for _, attrs in h.nodes(data=True):
        chain, c = [], attrs.get("cluster", "")
        while c:
            chain.append(c)
            c = clusters[c][1]
        attrs["cluster_label"] = clusters[attrs["cluster"]][0] if attrs.get("cluster") else ""
        attrs["cluster_path"] = " > ".join(reversed(chain))
    return h


def run(args) -> int:
    import networkx as nx

    from ncdc.ir.errors import SpecError, UsageError
    from ncdc.ir.graph import to_dot, wiring_graph

    from .output import write_output, write_text

    ext = os.path.splitext(args.output)[1].lower()
    if ext not in (".dot", ".gv", ".graphml"):
        raise UsageError(f"{args.output}: the output must end in .dot or .graphml (or .gv)")
    spec = load_spec(args)
    binding = optional_binding(spec, args, "edge labels")
    root = spec.site(args.block).node if args.block else spec.data
    g = wiring_graph(root, binding.env if binding is not None else None)
    try:
        if ext == ".graphml":
            write_output(args.output, lambda tmp: nx.write_graphml(_flat_clusters(g), tmp),
                         "--output")
        else:
            write_text(args.output, to_dot(g), "--output")
    except OSError as exc:
        raise SpecError(f"cannot write {args.output}: {exc.strerror}") from None
    mismatches = sum(1 for *_, a in g.edges(data=True) if "mismatch" in a)
    info = {"output": args.output, "nodes": g.number_of_nodes(), "wires": g.number_of_edges(),
            "mismatched_wires": mismatches}
    if args.json:
        emit_json(info)
    else:
        print(f"wrote {args.output}: {info['nodes']} nodes, {info['wires']} wires"
              + (f", {mismatches} mismatched" if mismatches else ""))
    return 0

