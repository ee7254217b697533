"""Blocks parametrised by their body: classes whose code is the same but for the class of one
submodule are one class that takes that submodule as a constructor argument.

The rule: two or more classes of a file whose source, once one single submodule of each is held
under the role name :data:`ROLE` and built by the caller, is the same text (its docstring's
inputs and returns aside) become the first of them,
``def __init__(self, config, body)`` holding ``self.body = body``; each caller builds the body
it held before and passes it, ``SinglePassMHC(self.config, MixtureOfExperts(self.config,
static_shapes=static_shapes))``, and the keyword arguments only the body took (``quant``,
``stand_in``, ``static_shapes``) are the caller's to pass. So a block drawn around different
bodies (the diagram's Single-Pass mHC around the attention and around the mixture) is one class,
as a hand-written decoder layer builds its ``mlp`` as one of two classes. Every instance runs
the code its own class ran before; only the body's attribute name (``body``) and the classes'
names change.
"""
from __future__ import annotations

import ast
import dataclasses

from .class_source import class_source, doc_text
from .classinfo import ClassInfo, Sub
from .members import Members
from .names import comment_text
from .statements import ASSIGN, Statement, splice

ROLE = "body"
"""The attribute, constructor argument and local a class parametrised by its body holds it as."""

_NAME = "_NcdcMergedClass"  # stands for the class name while sources are compared


def merge_bodies(gen, root: ClassInfo) -> None:
    """Make every group of classes of ``gen.order`` that differ only in one submodule's class
    one class taking it as an argument (the module docstring), rewriting their callers
    (``root`` and the classes of ``gen.order``); deterministic: groups are found in file
    order, each class joins at most one."""
    candidates = [c for c in gen.order if not c.method and c.parts is not None
                  and not c.arguments]
    shapes: dict[str, list[tuple[ClassInfo, Sub, tuple]]] = {}
    for c in candidates:
        for sub in c.members:
            if not isinstance(sub, Sub) or sub.repeat is not None or sub.info is None:
                continue
            held = _held(c, sub)
            if held is not None:
                shapes.setdefault(held[0], []).append((c, sub, held[1]))
    taken: set[int] = set()
    groups = []
    for entries in shapes.values():
        group = [e for e in entries if id(e[0]) not in taken]
        group = [e for i, e in enumerate(group) if all(e[0] is not f[0] for f in group[:i])]
        if len(group) < 2 or len({id(sub.info) for _, sub, _ in group}) < 2:
            continue
        taken |= {id(c) for c, _, _ in group}
        groups.append(group)
    for group in groups:
        _merge(gen, root, group)


def _held(c: ClassInfo, sub: Sub):
    """(the source of ``c`` with ``sub`` taken as the constructor argument :data:`ROLE`, its
    name and docstring left out; (parts, info) to write it from), or None where the role name
    or its locals would clash."""
    parts = c.parts
    call = [st for st in parts.forward if _attribute_spans(st.expr, sub.attr)]
    if len(call) != 1:
        return None
    renames = {}
    for t in call[0].bound:
        if not t.startswith(sub.attr):
            return None
        renames[t] = ROLE + t[len(sub.attr):]
    names = {n for st in parts.forward for n in (*st.reads, *st.bound)} | set(parts.ret)
    args = {w.var for w in parts.iface.inputs}
    if (set(renames.values()) | {ROLE}) & ((names | args) - set(renames)):
        return None
    if any(ROLE == getattr(m, "attr", "").split(".")[0] for m in c.members):
        return None
    forward = []
    for st in parts.forward:
        st = dataclasses.replace(st, expr=_rename_attribute(st.expr, sub.attr, ROLE))
        for old, new in renames.items():
            st = st.renamed(old, new)
        forward.append(st)
    ret = [renames.get(r, r) for r in parts.ret]
    members = Members()
    members.init = [Statement(ASSIGN, ROLE, (f"self.{ROLE}",)) if st.targets == (f"self.{sub.attr}",)
                    else st for st in parts.members.init]
    members.reset = list(parts.members.reset)
    subs = [m for m in c.members if isinstance(m, Sub) and m is not sub]
    needs = dataclasses.replace(
        parts.needs, passes_quant=any(m.info is not None and m.info.needs_quant for m in subs),
        passes_static=any(m.info is not None and m.info.needs_static for m in subs),
        passes_stand_in=any(m.info is not None and m.info.needs_stand_in for m in subs))
    info = dataclasses.replace(
        c, name=_NAME, arguments=(ROLE,),
        members=[Sub(ROLE, None, None) if m is sub else m for m in c.members],
        needs_quant=needs.quant or needs.passes_quant,
        needs_static=needs.static or needs.passes_static,
        needs_stand_in=bool(needs.user_data) or needs.passes_stand_in)
    held = dataclasses.replace(parts, info=info, needs=needs, members=members, forward=forward,
                               ret=ret, doc="-")
    text = class_source(held)
    return text, (held, info)


def _merge(gen, root: ClassInfo, group) -> None:
    """``group``'s classes become its first, taking its body as an argument; their callers
    build the body and pass it."""
    first, _, (held, info) = group[0]
    merged = [c for c, _, _ in group]
    bodies = {id(c): sub for c, sub, _ in group}
    first.arguments, first.members = info.arguments, info.members
    first.needs_quant, first.needs_static = info.needs_quant, info.needs_static
    first.needs_stand_in = info.needs_stand_in
    first.ctor_symbols = sorted({s for c in merged for s in c.ctor_symbols},
                                key=lambda s: gen.sym_name(s))
    doc = _union_doc([c.parts for c in merged])
    first.parts = dataclasses.replace(held, info=first, doc=doc)
    gen.order[:] = [c for c in gen.order if c is first or id(c) not in bodies]
    for caller in [*gen.order, root]:
        changed = False
        for m in caller.members:
            if isinstance(m, Sub) and m.info is not None and id(m.info) in bodies:
                body = bodies[id(m.info)]
                make = _make(first, body.make)
                caller.parts.members.init[:] = [
                    dataclasses.replace(st, expr=st.expr.replace(m.make, make))
                    if m.make in st.expr else st for st in caller.parts.members.init]
                m.info, m.body, m.make = first, body.info, make
                changed = True
        if changed and caller is not first:
            caller.source = class_source(caller.parts)
    first.source = class_source(first.parts)


def _make(info: ClassInfo, body: str) -> str:
    """The code building ``info`` around the body built by ``body`` (code), in a caller."""
    args = (["self.config"] if info.ctor_symbols else []) + [body]
    if info.needs_quant:
        args.append("quant=quant")
    if info.needs_stand_in:
        args.append("stand_in=stand_in")
    if info.needs_static:
        args.append("static_shapes=static_shapes")
    return f"{info.name}({', '.join(args)})"


def _union_doc(parts: list) -> str:
    """The docstring of the merged class: the first's, its inputs and returns naming each type
    the classes take or give there (``R[x, n, m] or Q(BF16)[x, n, m]``)."""
    first = parts[0]
    text = doc_text(first.iface, first.info.outputs)
    ins = [_alternatives([comment_text(str(p.iface.inputs[k].array), 60) for p in parts])
           for k in range(len(first.iface.inputs))]
    outs = [_alternatives([comment_text(str(p.info.outputs[k][0]), 60) for p in parts])
            for k in range(len(first.info.outputs))]
    ins_text = ", ".join(f"{w.var}: {t}" for w, t in zip(first.iface.inputs, ins, strict=True))
    old = text.split("\n\n")
    for i, para in enumerate(old):
        if para.startswith("Inputs: "):
            old[i] = f"Inputs: {ins_text or 'none'}.\nReturns: {', '.join(outs) or 'nothing'}."
    return "\n\n".join(old)


def _alternatives(texts: list[str]) -> str:
    return " or ".join(dict.fromkeys(texts))


def _attribute_spans(code: str, attr: str) -> list[ast.Attribute]:
    """The reads of ``self.<attr>`` in the expression ``code``."""
    if not code:
        return []
    tree = ast.parse(code, mode="eval")
    return [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == attr
            and isinstance(n.value, ast.Name) and n.value.id == "self"]


def _rename_attribute(code: str, attr: str, new: str) -> str:
    """``code`` with every ``self.<attr>`` read as ``self.<new>``."""
    spans = _attribute_spans(code, attr)
    return splice(code, [(n, f"self.{new}") for n in spans]) if spans else code
