"""The diagram as a scene: nested boxes, ports and wires, ready to lay out and draw.

A scene is plain data (JSON-ready): ``nodes`` by id and ``edges`` grouped by the container they
are drawn in. Blocks are containers: a block's body is drawn inside it, its inputs and outputs
are the block's ports, and a wire inside a block runs from one of the block's input ports or a
child's output port to a child's input port or one of the block's output ports. So every wire
belongs to exactly one container, and a collapsed block is simply drawn without its contents.

Rules:
- ``Block`` and a ``Broadcasted`` whose operator is a block (``BlockOperator``,
  ``ParaBlockOperator``) make a *block* node; a block that repeats shows ``rep`` (×N); a lifted
  block shows the axes it is lifted over.
- A block's ``label`` is its title as plain text (``labels.plain_label``), ``latex`` the title
  only where it is mathematics (``labels.is_math``), ``seg`` its parameter-key segment
  (``ir.params.block_segments``: ``Single-Pass mHC~1`` for a repeated title), ``color`` its
  tag's ``fill_color``.
- Every other ``Broadcasted`` is an *operator* node: ``meaning`` is its label by IR class
  (the descriptor's ``shown``, ``ir/operators``), ``label`` its own name where it has one beyond the kind, else
  the meaning; ``glyph`` the operator's family (box colour).
- ``Rearrangement``, ``Composed`` and ``ProductOfMorphisms`` are pure wiring and make no node.
- ``Grab``/``Drop`` (and a ``ParaWrap``'s grabs and drops) make tape read/write nodes.
- A cut (``Truncated``) term makes a *cut* node; its complete parts are drawn.
- An operator occurrence the file defines by an expansion (``openings``,
  :mod:`ncdc.view.opened`) carries ``expansion`` (its key, the operator, the formula and
  description the export writes, and ``error`` where it cannot open); the expansion's diagram
  is its contents, drawn inside it from its input ports to its output ports as a block's body
  is, with node ids ``OCCURRENCE>ID`` (``ID`` the node's id in the expansion's own scene) and
  the expansion's own sizes left symbolic.
- A wire is labelled with the array it carries (``label``; ``bound`` given an environment),
  its axes as text (``axes``: ``x, m``; ``boundAxes``: ``x=4, m=7168``), and marked ``dead``
  when one of its axes can hold dead positions (affine sparse, top-k sparse or concatenated
  axes).

Node ids are the JSON paths of the terms they draw, so they are unique and stable.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import sympy

from ncdc.ir.axes import AffineSparseAxis, ConcatenatedAxis, SparseAxis
from ncdc.ir.cost import block_costs, with_tokens
from ncdc.ir.env import Env
from ncdc.ir.errors import SpecError
from ncdc.ir.morphisms import Block, Broadcasted, CoupledScan, Drop, Morphism, Scan, Truncated
from ncdc.ir.params import block_segments, param_roles, param_specs, titled_children
from ncdc.ir.shapes import array_text, size_text
from ncdc.ir.traverse import Descend, Visitor, traverse
from ncdc.ir.walk import arity, walk

from .labels import is_math, operator_label, plain_label

if TYPE_CHECKING:
    from .opened import Opening


def glyph_family(op) -> str:
    """What the picture draws for an operator: its descriptor's family (``other`` for an
    object that is no IR operator, or a box drawn as a block)."""
    family = getattr(type(op), "family", "")
    return family if family and family != "box" else "other"


class _End:
    """The producing end of a wire: a node's output port (or a container's input port)."""

    __slots__ = ("node", "obj", "port")

    def __init__(self, node: str, port: int, obj):
        self.node, self.port, self.obj = node, port, obj


def _safe(fn, default):
    try:
        return fn()
    except (SpecError, RecursionError, TypeError, ValueError, AttributeError):
        return default


def _can_be_dead(obj) -> bool:
    shape = getattr(obj, "shape", None)
    if shape is None:
        return False
    return any(isinstance(a, (AffineSparseAxis, SparseAxis, ConcatenatedAxis)) for a in shape)


def _shape_list(obj, env: Env | None) -> list[str]:
    shape = getattr(obj, "shape", None)
    if shape is None:
        return []
    return [size_text(a.size, env) if env is not None else a.label for a in shape]


class SceneBuilder:
    """Builds the scene of one root morphism (see the module docstring)."""

    def __init__(self, env: Env | None = None, openings: dict[str, Opening] | None = None):
        self.env = env
        self.openings = openings or {}
        self.nodes: dict[str, dict] = {}
        self.edges: dict[str, list[dict]] = {}
        self.tags: dict[str, list[str]] = {}
        self.tapes: dict[str, dict] = {}
        self.block_nodes: dict[int, str] = {}  # id(Block) -> its node
        self.segments: dict[int, str] = {}  # id(Block) -> its parameter-key segment (``~k``)

    # ------------------------------------------------------------------ nodes and wires
    def add_node(self, nid: str, parent: str | None, kind: str, label: str, **extra) -> str:
        node = {"id": nid, "parent": parent, "kind": kind, "label": label, "children": [],
                "inputs": 0, "outputs": 0}
        node.update(extra)
        self.nodes[nid] = node
        if parent is not None:
            self.nodes[parent]["children"].append(nid)
        return nid

    def wire(self, container: str, src: _End, dst: str, dst_port: int) -> None:
        edges = self.edges.setdefault(container, [])
        obj = src.obj
        edge = {"id": f"{container}#{len(edges)}", "src": src.node, "srcPort": src.port,
                "dst": dst, "dstPort": dst_port,
                "label": array_text(obj) if obj is not None else "",
                "dead": _can_be_dead(obj)}
        if self.env is not None and obj is not None:
            edge["bound"] = array_text(obj, self.env)
        edge["shape"] = _shape_list(obj, None)
        if self.env is not None:
            edge["sizes"] = _shape_list(obj, self.env)
        edges.append(edge)

    def ports(self, nid: str, inputs: int, outputs: int) -> None:
        self.nodes[nid]["inputs"] = max(self.nodes[nid]["inputs"], inputs)
        self.nodes[nid]["outputs"] = max(self.nodes[nid]["outputs"], outputs)

    # ------------------------------------------------------------------ morphisms
    def build(self, m: Morphism, inputs: list[_End], path: str, cont: str) -> list[_End]:
        """The ends of ``m``'s outputs, its nodes and wires drawn in container ``cont``."""
        return traverse(m, inputs, _Drawing(self, cont), path)

    def block(self, block: Block, site: Morphism, inputs, path: str, body_step: str,
              draw: _Drawing) -> Descend:
        """A block node in the current container; its body (at ``path + body_step``) drawn
        inside it, from the block's input ports to its output ports."""
        cont = draw.cont
        tag = block.tag
        rep = tag.repetition
        rep_text = size_text(rep, self.env) if self.env is not None else sympy.sstr(rep)
        degree = [a.label for a in getattr(site, "degree", ())] if site is not block else []
        nid = self.add_node(
            path, cont, "block", plain_label(tag.title),
            latex=tag.title if is_math(tag.title) else "", tag=str(tag.uid),
            rep=None if rep == 1 else rep_text, lifted=degree, path=path,
            description=tag.description or "", formula=tag.formula or "",
            color=tag.fill_color or "")
        self.tags.setdefault(str(tag.uid), []).append(nid)
        self.block_nodes[id(block)] = nid
        self.segments.update(block_segments(titled_children(block)))
        dom = _safe(lambda: tuple(site.dom), tuple(e.obj for e in inputs))
        cod = _safe(lambda: tuple(site.cod), None)
        for k, e in enumerate(inputs):
            self.wire(cont, e, nid, k)
        inner_dom = _safe(lambda: tuple(block.dom), dom)
        inner = [_End(nid, k, inner_dom[k] if k < len(inner_dom) else None)
                 for k in range(len(inputs))]

        def close(results: list) -> list[_End]:
            draw.conts.pop()
            for j, e in enumerate(results):
                self.wire(nid, e, nid, j)
            shown = cod if cod is not None else tuple(e.obj for e in results)
            self.nodes[nid]["dom"] = [array_text(o) for o in dom]
            self.nodes[nid]["cod"] = [array_text(o) for o in shown]
            self.ports(nid, len(inputs), max(len(shown), len(results)))
            return [_End(nid, j, o) for j, o in enumerate(shown)]

        draw.conts.append(nid)
        return Descend(((body_step, block.body),), inner, then=close)

    def operator(self, b: Broadcasted, inputs, path: str, cont: str) -> list[_End]:
        op = b.operator
        kind = type(op).__name__
        meaning = operator_label(op)
        name = plain_label(op.name.latex) if op.name is not None and op.label else ""
        if name.lower().replace(" ", "") in (kind.lower(), meaning.lower().replace(" ", "")):
            name = ""  # a name that only repeats the kind (``einops``)
        label = name or meaning
        extra = {"op": kind, "glyph": glyph_family(op), "path": path,
                 "meaning": meaning, "named": bool(name),
                 "latex": op.name.latex if op.name is not None and is_math(op.name.latex)
                 else ""}
        formula = getattr(op, "formula", None)
        if formula is not None and not isinstance(formula, str):
            extra["formula"] = sympy.latex(formula)
            extra["formulaText"] = sympy.sstr(formula)
        if kind == "TypeConvert":
            extra["format"] = f"{op.source} → {op.target}"
        if kind == "Elementwise":
            extra["function"] = getattr(op, "function", "")
        extra["params"] = [
            {"role": role, "shape": [sympy.sstr(s) for s in shape], "axes": list(labels),
             "datatype": str(dt), "learned": learned}
            for role, shape, labels, dt, learned in _safe(lambda: param_roles(b), [])]
        extra["degree"] = [a.label for a in _safe(lambda: b.degree, ())]
        extra["dom"] = [array_text(o) for o in _safe(lambda: tuple(b.dom), ())]
        nid = self.add_node(path, cont, "operator", label, **extra)
        for k, e in enumerate(inputs):
            self.wire(cont, e, nid, k)
        cod = _safe(lambda: tuple(b.cod), tuple(None for _ in b.output_weaves))
        self.ports(nid, len(inputs), len(cod))
        if path in self.openings:
            self.open_expansion(nid, self.openings[path])
        return [_End(nid, j, o) for j, o in enumerate(cod)]

    def open_expansion(self, nid: str, o: Opening) -> None:
        """Operator node ``nid`` marked with expansion ``o`` and, where its diagram takes and
        gives as many arrays as the occurrence, holding that diagram's scene."""
        node = self.nodes[nid]
        info = {"key": o.key, "operator": o.operator, "formula": o.formula,
                "description": o.description, "error": o.error}
        node["expansion"] = info
        if o.root is None:
            return
        sub = build_scene(o.root, None, o.operator, o.inner)
        kinds = [n["kind"] for n in sub["nodes"].values()]
        n_in, n_out = kinds.count("input"), kinds.count("output")
        if (n_in, n_out) != (node["inputs"], node["outputs"]):
            info["error"] = (f"the expansion takes {n_in} and gives {n_out} arrays; the "
                             f"occurrence takes {node['inputs']} and gives {node['outputs']}")
            return
        _graft(self, nid, sub)

    def tape_node(self, path: str, cont: str, slot, mode: str, size) -> str:
        nid = self.add_node(path, cont, "tape", plain_label(slot.label), mode=mode,
                            slot=str(slot.uid), path=path)
        self.ports(nid, 1 if mode == "write" else 0, 1 if mode == "read" else 0)
        entry = self.tapes.setdefault(str(slot.uid), {"label": slot.label, "reads": [],
                                                      "writes": [],
                                                      "shape": array_text(size)})
        entry["reads" if mode == "read" else "writes"].append(nid)
        return nid


def _graft(b: SceneBuilder, nid: str, sub: dict) -> None:
    """Put scene ``sub`` inside node ``nid`` of ``b``: its root becomes ``nid``, its input
    ``k`` and output ``j`` nodes become ``nid``'s ports, every other id is prefixed."""
    root, prefix = sub["root"], nid + ">"
    ports: dict[str, str] = {}
    for sid, n in sub["nodes"].items():
        if n["kind"] in ("input", "output"):
            ports[sid] = nid

    def rename(i: str) -> str:
        return nid if i == root else ports.get(i) or prefix + i

    for sid, n in sub["nodes"].items():
        if sid == root or sid in ports:
            continue
        copy = {**n, "id": rename(sid), "parent": rename(n["parent"]),
                "children": [rename(c) for c in n["children"]]}
        if copy.get("tag"):
            copy["tag"] = prefix + copy["tag"]
        b.nodes[copy["id"]] = copy
    b.nodes[nid]["children"] = [rename(c) for c in sub["nodes"][root]["children"]
                                if c not in ports]
    for cont, es in sub["edges"].items():
        inside = rename(cont)
        b.edges[inside] = [{**e, "id": f"{inside}#{i}", "src": rename(e["src"]),
                            "dst": rename(e["dst"]),
                            "srcPort": int(e["src"][3:]) if e["src"] in ports else e["srcPort"],
                            "dstPort": int(e["dst"][4:]) if e["dst"] in ports else e["dstPort"]}
                           for i, e in enumerate(es)]
    for uid, ids in sub["tags"].items():
        b.tags[prefix + uid] = [rename(i) for i in ids]
    for uid, t in sub["tapes"].items():
        b.tapes[prefix + uid] = {**t, "reads": [rename(i) for i in t["reads"]],
                                 "writes": [rename(i) for i in t["writes"]]}


def _closing(d: Descend, close) -> Descend:
    """``d``, with ``close`` applied to the values its chain of continuations ends with."""
    def then(results):
        out = d.then(results) if d.then is not None else results
        return _closing(out, close) if isinstance(out, Descend) else close(out)
    return Descend(d.items, d.ins, d.title, then)


class _Drawing(Visitor):
    """Wire values are :class:`_End` objects; the nodes and wires go to the
    :class:`SceneBuilder`, each in the innermost open container (``conts``)."""

    leaves = (Block, Drop)

    def __init__(self, b: SceneBuilder, cont: str):
        self.b = b
        self.conts = [cont]

    @property
    def cont(self) -> str:
        return self.conts[-1]

    def leaf(self, node, ins, scope):
        if isinstance(node, Block):
            return self.b.block(node, node, ins, scope.path, ".body", self)
        nid = self.b.tape_node(scope.path, self.cont, node.tape, "write", node.size)
        for k, e in enumerate(ins[:1]):                   # a free Drop
            self.b.wire(self.cont, e, nid, k)
        return []

    def operator(self, node, ins, scope):
        return self.b.operator(node, ins, scope.path, self.cont)

    def box(self, node, ins, scope):
        block = node.operator.block
        if isinstance(block, Block):
            return self.b.block(block, node, ins, scope.path, ".operator.block.body", self)
        return self.operator(node, ins, scope)

    def rearrange(self, node, ins, scope):
        return [ins[j] for j in node.mapping if 0 <= j < len(ins)]

    def repetitions(self, block, scope) -> int:
        return 1

    def grab(self, slot, array, scope):
        nid = self.b.tape_node(scope.path, self.cont, slot, "read", array)
        return _End(nid, 0, array)

    def drop(self, slot, value, array, scope) -> None:               # a ParaWrap's drop
        nid = self.b.tape_node(scope.path, self.cont, slot, "write", value.obj)
        self.b.wire(self.cont, value, nid, 0)

    def truncated(self, t: Truncated, ins, scope):
        content = t.partial.get("content")
        body = t.partial.get("body")
        if t.expected == "Composed" and isinstance(content, tuple) and content:
            return Descend(tuple((f".content[{i}]", item) for i, item in enumerate(content)
                                 if isinstance(item, Morphism)), ins)
        b, cont, path = self.b, self.cont, scope.path
        if t.expected == "Block" and isinstance(body, Morphism):
            nid = b.add_node(path, cont, "block", "(cut block)", latex="", tag="",
                             rep=None, lifted=[], path=path, cut=True,
                             description=t.reason, formula="", color="")
            inside, close = self._enter(nid, ins)
            return Descend(((".body", body),), inside, then=close)
        nid = b.add_node(path, cont, "cut", f"cut: {t.expected or 'term'}", path=path,
                         description=t.reason)
        b.ports(nid, len(ins), 0)
        for k, e in enumerate(ins):
            b.wire(cont, e, nid, k)
        return []

    def stride(self, node, ins, scope):
        return []

    def _enter(self, nid: str, ins, carried=None):
        """Wire ``ins`` into the container ``nid`` and enter it: the ends inside it, and the
        function that leaves it with the body's results (wired out to its ports; the arrays
        the outputs carry are ``carried(results)``, by default the results' own)."""
        b = self.b
        for k, e in enumerate(ins):
            b.wire(self.cont, e, nid, k)

        def close(results):
            self.conts.pop()
            for j, e in enumerate(results):
                b.wire(nid, e, nid, j)
            b.ports(nid, len(ins), len(results))
            objs = carried(results) if carried else [e.obj for e in results]
            return [_End(nid, j, obj) for j, obj in enumerate(objs)]

        self.conts.append(nid)
        return [_End(nid, k, e.obj) for k, e in enumerate(ins)], close

    def scan(self, node: Scan, ins, scope):
        """A container titled by the recurrence (pyncd's viewer: ``Scan over l, N=3``) holding
        ``base`` and one ``step``; its result is the history."""
        b, cont, path = self.b, self.cont, scope.path
        title = f"Scan over {node.axis.label}, N={sympy.sstr(node.n)}"
        nid = b.add_node(path, cont, "block", title, latex="", tag="", rep=None, lifted=[],
                         path=path, cut=False, formula="",
                         description="H_0 = base(X); H_{l+1} = step(H_l, U[l]); the result "
                                     "stacks H_0 ... H_N", color="")

        def history(results):
            try:
                return tuple(node.cod)
            except SpecError:  # ill-typed: validation says where
                return tuple(e.obj for e in results)

        inside, close = self._enter(nid, ins, history)
        walk_in = super().coupled_scan if isinstance(node, CoupledScan) else super().scan
        return _closing(walk_in(node, inside, scope), close)

    def coupled_scan(self, node, ins, scope):
        return self.scan(node, ins, scope)

    def scan_steps(self, node, scope) -> int:
        return 1

    def unknown(self, m, ins, scope):
        path, cont = scope.path, self.cont
        nid = self.b.add_node(path, cont, "operator", type(m).__name__, glyph="other",
                              op=type(m).__name__, path=path)
        self.b.ports(nid, len(ins), 0)
        for k, e in enumerate(ins):
            self.b.wire(cont, e, nid, k)
        return []


def _attach_params(scene_nodes: dict, root: Morphism, env: Env | None) -> None:
    """Give every node the parameter keys (interpreter keys, from ``root``) below it."""
    specs = _safe(lambda: param_specs(root, env), None)
    if specs is None:
        return
    by_site: dict[str, list] = {}
    for p in specs:
        by_site.setdefault(p.site.path, []).append(p)
    for nid, node in scene_nodes.items():
        if node["kind"] == "operator" and nid in by_site:
            node["keys"] = [{"key": p.key, "shape": [size_text(s, env) if env else sympy.sstr(s)
                                                     for s in p.shape],
                             "learned": p.learned} for p in by_site[nid]]


def _label_unknown_wires(nodes: dict, edges: dict) -> None:
    """A wire whose producer's array is unknown (a cut root's inputs) carries the array its
    consumer expects."""
    for es in edges.values():
        for e in es:
            if e["label"]:
                continue
            dom = nodes[e["dst"]].get("dom") or ()
            if e["dstPort"] < len(dom):
                e["label"] = dom[e["dstPort"]]


def _bracket(text: str) -> str:
    """``R[x, m]`` -> ``x, m`` (the axes part of an array's text)."""
    start = text.find("[")
    return text[start + 1:-1] if start >= 0 and text.endswith("]") else text


def _label_axes(edges: dict) -> None:
    """Each wire's short label: its axes as text (``x, m``; ``\\bar{z}`` as ``z``) and, bound,
    each with its size (``x=4, m=7168``)."""
    def text(labels):
        return ", ".join(plain_label(a) for a in labels)

    for es in edges.values():
        for e in es:
            shape = e["shape"] or [a for a in _bracket(e["label"]).split(", ") if a]
            e["axes"] = text(shape)
            if "bound" in e:
                sizes = e.get("sizes") or _bracket(e["bound"]).split(", ")
                e["boundAxes"] = (", ".join(f"{plain_label(a)}={n}" for a, n in zip(shape, sizes, strict=True))
                                  if len(sizes) == len(shape) else _bracket(e["bound"]))


def _cost_text(expr, env: Env | None) -> str:
    """A cost figure: the number at the binding, else the (expanded) formula."""
    return size_text(sympy.expand(expr), env)


def _attach_costs(scene_nodes: dict, root: Morphism, env: Env | None) -> None:
    """Give every block node the cost of one call of it (``ir.cost``): learned elements,
    elements activated per token, FLOPs per token, bfloat16 weight bytes, decoder state."""
    memo = _safe(lambda: block_costs(root), None)
    if memo is None:
        return
    by_path = {}
    for s in walk(root):
        if isinstance(s.node, Block):
            by_path[s.path] = s.node
    for nid, node in scene_nodes.items():
        if node["kind"] != "block":
            continue
        block = by_path.get(nid) or by_path.get(nid + ".operator.block")
        c = memo.get(id(block)) if block is not None else None
        if c is None:
            continue
        c = _safe(lambda c=c, block=block: with_tokens(c, block), None)
        if c is None:
            continue
        state = sum((st.bytes for st in c.state), sympy.Integer(0))
        node["cost"] = {
            "learned elements": _cost_text(c.learned, env),
            "activated per token": _cost_text(c.activated_per_token, env),
            "FLOPs per token": _cost_text(c.flops_per_token, env),
            "weights (bfloat16 bytes)": _cost_text(c.bytes_at("bfloat16"), env),
            "decoder state (bytes)": _cost_text(state, env),
        }


def build_scene(root: Morphism, env: Env | None = None, name: str = "",
                openings: dict[str, Opening] | None = None) -> dict:
    """The scene of ``root`` (see the module docstring); the root's inputs and outputs are
    nodes of their own (``in:k``, ``out:j``); ``openings``: the expansions its operator
    occurrences open to, by occurrence path."""
    b = SceneBuilder(env, openings)
    rid = "root"
    b.add_node(rid, None, "root", name or getattr(root, "title", "") or "model", path=root.path)
    dom = _safe(lambda: tuple(root.dom), tuple(None for _ in range(arity(root))))
    inputs = []
    for k, o in enumerate(dom):
        nid = b.add_node(f"in:{k}", rid, "input", f"input {k}", shape=array_text(o))
        b.ports(nid, 0, 1)
        inputs.append(_End(nid, 0, o))
    try:
        results = b.build(root, inputs, root.path, rid)
    except RecursionError:
        raise SpecError("the diagram is nested too deeply to draw", root.path) from None
    for j, e in enumerate(results):
        nid = b.add_node(f"out:{j}", rid, "output", f"output {j}", shape=array_text(e.obj))
        b.ports(nid, 1, 0)
        b.wire(rid, e, nid, 0)
    _label_unknown_wires(b.nodes, b.edges)
    _label_axes(b.edges)
    b.segments.update(block_segments([root] if isinstance(root, Block)
                                     else titled_children(root)))
    for bid, nid in b.block_nodes.items():
        if bid in b.segments:
            b.nodes[nid]["seg"] = plain_label(b.segments[bid])
    _attach_params(b.nodes, root, env)
    _attach_costs(b.nodes, root, env)
    return {"root": rid, "nodes": b.nodes, "edges": b.edges, "tags": b.tags, "tapes": b.tapes}


__all__ = ["SceneBuilder", "build_scene", "glyph_family"]
