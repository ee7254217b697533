"""The wiring of a broadcasted-category morphism as a networkx graph.

Nodes are the *boxes* — every ``Broadcasted`` (an operator; a ``BlockOperator`` box is one node
labelled with its block's title), every tape slot (one node per slot: ``Drop``s and ``ParaWrap``
drop entries write into it, ``Grab``s and grab entries read from it), every cut (``Truncated``)
term — plus one node per input and output wire of the root. ``Rearrangement``s are pure wiring
(copy, discard, permute) and ``Block``s are transparent (their nodes carry the chain of block
titles), so neither makes nodes. Edges are wires: ``MultiDiGraph`` edges from the producing port
to the consuming port, labelled with the array they carry (``shape``: ``Q(BF16)[x, n, m]``, or
numbers with an environment). Joins are compared with :func:`ir.shapes.compare_objects` — the
same rule validation uses — and a disagreeing wire carries ``mismatch``.

Node ids are the JSON paths of the boxes (``in:0``, ``out:0``, ``tape:<uid>`` for the others),
so they are unique and stable. Node attributes: ``kind`` (input | output | box | tape |
truncated), ``label``, ``operator``, ``titles`` (joined by `` / ``), ``path`` and ``cluster``
(the JSON path of the innermost enclosing block; ``graph["clusters"]`` maps each block path to
its label, ``×N`` included, and the path of the block around it). A wire whose producer's array
is unknown (a cut term) carries the consumer's expected array. Nothing here
knows about JSON files, numpy or torch.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from .env import Env
from .errors import SpecError
from .frozen import quick_init
from .morphisms import Block, Broadcasted, Morphism, Rearrangement, Truncated
from .shapes import array_text, compare_objects, size_text
from .traverse import Descend, Scope, Visitor, traverse
from .walk import arity


@quick_init
@dataclass(frozen=True)
class Port:
    """One output end of a wire: the node, its port number and the array it carries."""

    node: str
    index: int
    obj: object


class _Wiring(Visitor):
    """Wire values are :class:`Port` objects; boxes, tape slots and cut terms become nodes."""

    def __init__(self, env: Env | None):
        self.g = nx.MultiDiGraph()
        self.g.graph["clusters"] = {}
        self.env = env

    def node(self, nid: str, kind: str, label: str, scope: Scope | None = None,
             operator: str = ""):
        if nid not in self.g:
            titles, path, cluster = ((scope.titles, scope.path, scope.block) if scope
                                     else ((), "", ""))
            self.g.add_node(nid, kind=kind, label=label, titles=" / ".join(titles), path=path,
                            operator=operator, cluster=cluster)
        return nid

    def wire(self, src: Port, dst: str, dst_index: int, expected=None) -> None:
        carried = src.obj if src.obj is not None else expected
        attrs = {"src_port": src.index, "dst_port": dst_index,
                 "shape": array_text(carried, self.env) if carried is not None else "unknown"}
        if expected is not None and src.obj is not None:
            probs = [p for p in compare_objects((src.obj,), (expected,)) if p.is_error]
            if probs:
                attrs["mismatch"] = probs[0].describe("producer", "consumer")
        self.g.add_edge(src.node, dst, **attrs)

    # ------------------------------------------------------------------ hooks
    def repetitions(self, block, scope) -> int:
        return 1  # the wiring of one iteration; the cluster label says ×N

    def enter_block(self, block: Block, ins, scope: Scope) -> None:
        parent = scope.blocks[-2] if len(scope.blocks) > 1 else ""
        self.g.graph["clusters"][scope.block] = (self.block_label(block), parent)

    def rearrange(self, m: Rearrangement, ins, scope):
        return [ins[j] for j in m.mapping if 0 <= j < len(ins)]

    def operator(self, b: Broadcasted, ins, scope):
        op = b.operator
        kind_name = type(op).__name__
        label = f"{kind_name} {op.label}".strip() if op.label else kind_name
        return self.box_node(b, ins, scope, label, kind_name)

    def box(self, b: Broadcasted, ins, scope):
        op = b.operator
        block = getattr(op, "block", None)  # box() serves the block operators
        title = self.block_label(block) if isinstance(block, Block) else "(block)"
        label = f"{title} [{op.label}]" if op.label else title
        return self.box_node(b, ins, scope, label, type(op).__name__)

    def box_node(self, b: Broadcasted, ins, scope, label: str, kind_name: str):
        nid = self.node(scope.path, "box", label, scope, kind_name)
        try:
            expected = tuple(b.dom)
        except SpecError:
            expected = ()
        for k, p in enumerate(ins):
            self.wire(p, nid, k, expected[k] if k < len(expected) else None)
        try:
            cod = tuple(b.cod)
        except SpecError:
            cod = tuple(None for _ in b.output_weaves)
        return [Port(nid, j, a) for j, a in enumerate(cod)]

    def grab(self, slot, array, scope):
        return Port(self.tape(slot, scope), 0, array)

    def drop(self, slot, value, array, scope) -> None:
        entry = scope.path.rpartition(".")[2].startswith("drops[")  # a ParaWrap's drop entry
        self.wire(value, self.tape(slot, scope), 0, None if entry else array)

    def tape(self, slot, scope: Scope) -> str:
        nid = f"tape:{slot.uid}"
        if nid not in self.g:
            self.g.add_node(nid, kind="tape", label=f"tape {slot.label}", titles="",
                            path=slot.path, operator="", cluster=scope.block)
        return nid

    def block_label(self, block: Block) -> str:
        """The block's title, with ``×N`` when its body repeats."""
        rep = block.tag.repetition
        if rep == 1:
            return block.title
        return f"{block.title} ×{size_text(rep, self.env)}"

    def truncated(self, t: Truncated, ins, scope):
        content = t.partial.get("content")
        body = t.partial.get("body")
        if t.expected == "Composed" and isinstance(content, tuple) and content:
            kept = [m for m in content if isinstance(m, Morphism)]
            return Descend(tuple((f".content[{i}]", m) for i, m in enumerate(kept)), ins)
        if t.expected == "Block" and isinstance(body, Morphism):
            return Descend(((".body", body),), ins, title="(truncated block)")
        return self.cut_node(t, ins, scope)

    def cut_node(self, t, ins, scope):
        nid = self.node(scope.path, "truncated", f"cut: {t.expected or 'term'}", scope)
        for k, p in enumerate(ins):
            self.wire(p, nid, k)
        return []

    def stride(self, m, ins, scope):
        return self.unknown(m, ins, scope)

    def unknown(self, m, ins, scope):
        nid = self.node(scope.path, "box", type(m).__name__, scope)
        for k, p in enumerate(ins):
            self.wire(p, nid, k)
        return []


def wiring_graph(root: Morphism, env: Env | None = None, root_path: str | None = None
                 ) -> nx.MultiDiGraph:
    """The wiring graph of ``root`` (see the module docstring). ``env`` prints bound sizes."""
    b = _Wiring(env)
    path = root.path if root_path is None else root_path  # type: ignore[attr-defined]  # on each subclass
    title = root.title if isinstance(root, Block) else path
    b.g.graph["name"] = title
    try:
        try:
            dom = tuple(root.dom)
        except SpecError:
            dom = tuple(None for _ in range(arity(root)))
        inputs = []
        for k, obj in enumerate(dom):
            nid = b.node(f"in:{k}", "input", f"input {k}")
            inputs.append(Port(nid, 0, obj))
        results = traverse(root, inputs, b, path)
    except RecursionError:  # the traversal is iterative; typing (dom, cod) is recursive
        raise SpecError("the morphism is nested too deeply to draw", path) from None
    for j, p in enumerate(results):
        nid = b.node(f"out:{j}", "output", f"output {j}")
        b.wire(p, nid, 0)
    return b.g


def _dot_quote(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


_SHAPES = {"input": "invhouse", "output": "house", "tape": "cylinder", "truncated": "octagon",
           "box": "box"}


def to_dot(g: nx.MultiDiGraph) -> str:
    """Graphviz text for a wiring graph (written by hand: no pydot dependency). Boxes sit in
    nested ``cluster`` subgraphs, one per enclosing block, labelled with the block's title and
    ``×N`` when it repeats."""
    clusters: dict[str, tuple[str, str]] = g.graph.get("clusters", {})
    members: dict[str, list[str]] = {}
    for nid, attrs in g.nodes(data=True):
        members.setdefault(attrs.get("cluster", ""), []).append(nid)
    inner: dict[str, list[str]] = {}
    for cid, (_, parent) in clusters.items():
        inner.setdefault(parent, []).append(cid)
    lines = [f"digraph {_dot_quote(g.graph.get('name', 'wiring'))} {{", "  rankdir=LR;",
             "  compound=true;", "  node [fontname=\"Helvetica\"];",
             "  edge [fontname=\"Helvetica\", fontsize=10];"]

    def emit(cid: str, indent: str) -> None:
        for nid in members.get(cid, ()):
            attrs = g.nodes[nid]
            shape = _SHAPES.get(attrs.get("kind"), "box")
            lines.append(f"{indent}{_dot_quote(nid)} [label={_dot_quote(attrs.get('label', nid))}"
                         f", shape={shape}];")
        for sub in inner.get(cid, ()):
            if not members.get(sub) and not inner.get(sub):
                continue
            lines.append(f"{indent}subgraph {_dot_quote('cluster_' + sub)} {{")
            lines.append(f"{indent}  label={_dot_quote(clusters[sub][0])}; style=rounded;")
            emit(sub, indent + "  ")
            lines.append(f"{indent}}}")

    emit("", "  ")
    for u, v, attrs in g.edges(data=True):
        extra = ", color=red" if "mismatch" in attrs else ""
        lines.append(f"  {_dot_quote(u)} -> {_dot_quote(v)} "
                     f"[label={_dot_quote(attrs.get('shape', ''))}{extra}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


__all__ = ["Port", "to_dot", "wiring_graph"]
