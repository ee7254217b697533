"""``ncdc graph``: the wiring of a block as a graph file — boxes as nodes, wires as edges
labelled with their shapes (:mod:`ir.graph`). ``-o FILE.dot`` writes Graphviz text, ``-o
FILE.graphml`` GraphML (networkx). Sizes are symbolic unless ``--preset``/``--size`` is given."""
from __future__ import annotations

import os
import sys

import networkx as nx
from ncdc.ir.errors import SpecError
from ncdc.ir.graph import to_dot, wiring_graph

from .common import add_size_args, add_spec_args, emit_json, load_spec
from .show import optional_binding


def add_parser(sub) -> None:
    p = sub.add_parser("graph", help="write the wiring graph (.dot or .graphml)",
                       description=__doc__)
    add_spec_args(p)
    add_size_args(p, default_preset="none (symbolic shapes)")
    p.add_argument("--block", default=None, help="the block to draw (default: the whole model)")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="output file, .dot or .graphml")
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
    ext = os.path.splitext(args.output)[1].lower()
    if ext not in (".dot", ".gv", ".graphml"):
        print(f"error: {args.output}: the output must end in .dot or .graphml", file=sys.stderr)
        return 2
    spec = load_spec(args)
    binding = optional_binding(spec, args, "edge labels")
    root = spec.site(args.block).node if args.block else spec.data
    g = wiring_graph(root, binding.env if binding is not None else None)
    try:
        if ext == ".graphml":
            nx.write_graphml(_flat_clusters(g), args.output)
        else:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(to_dot(g))
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
