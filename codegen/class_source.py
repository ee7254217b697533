"""The source text of one generated class: docstring, ``__init__`` signature and body, ``forward``
signature, prologue (batch shape, data-fixed sizes, pairs) and the lowered statements."""
from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass

from ncdc.ir.names import plain_title

from .boundary import default_statements
from .classinfo import INDENT, ClassInfo, Sub
from .classstate import Batch, Interface, Needs
from .emit import wrap_line
from .experts import expert_attribute_lines
from .names import check_docstring, comment_text, docstring, string_literal
from .passes import simplify
from .statements import ASSIGN, EXPR, IF, RETURN, Statement, print_body

BASE = "Module"
"""The base class of every generated class (:func:`base_class_source`)."""


INIT_WEIGHTS = '''    def init_weights(self, module=None):
        """Every parameter and buffer as eager construction sets it (after building on the meta
        device and ``to_empty``): each submodule's ``reset_parameters``, children first."""
        module = self if module is None else module
        for child in module.children():
            self.init_weights(child)
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
'''
"""The base class's ``init_weights``: the eager initialisation, in eager construction's order."""

EXTRA_REPR = '''    def extra_repr(self):
        """The shapes of the block's own parameters and buffers (submodules print theirs)."""
        arrays = [*self.named_parameters(recurse=False), *self.named_buffers(recurse=False)]
        return ", ".join(f"{k}={list(t.shape)}" for k, t in arrays)
'''
"""The base class's ``extra_repr`` (what ``print(module)`` shows of each block)."""


def base_class_source(rounds: bool, config_name: str, methods: tuple = ()) -> str:
    """The generated file's base class: it keeps the file's config (``config_name``; None
    means its defaults) as ``self.config``, which every size and constant is read from; an
    empty ``reset_parameters`` (a class with parameters of its own overrides it); one recursive
    ``init_weights`` (every submodule's ``reset_parameters``, children first); an
    ``extra_repr`` giving the shapes of a block's own arrays; where the file rounds
    (``rounds``), the ``quant`` switch and ``self.held(x, encoding)``: the value as held in its
    storage format in emulate mode, ``x`` itself in exact mode; and ``methods``, the source of
    every block holding nothing of its own (:func:`method_source`), which any block calls as
    ``self.<name>(...)``."""
    doc = (f"Base of the blocks below: ``self.config`` is the {config_name} (None: the "
           "defaults);\n    ``reset_parameters`` sets a block's own parameters (none here)")
    doc += (';\n    ``quant="emulate"`` rounds every value to its storage format, ``"exact"`` '
            'never rounds."""' if rounds else '."""')
    lines = [f"class {BASE}(nn.Module):", INDENT + '"""' + doc, "",
             INDENT + "def __init__(self, config=None" + (', quant="exact"' if rounds else "")
             + "):",
             INDENT * 2 + "super().__init__()",
             INDENT * 2 + f"self.config = {config_name}() if config is None else config"]
    if rounds:
        lines += [INDENT * 2 + 'self.emulate = quant == "emulate"',
                  "",
                  INDENT + "def held(self, x, encoding, channels=None):",
                  INDENT * 2 + '"""``x`` as held in ``encoding`` (MX blocks of ``channels``) '
                  'in emulate mode, else ``x``."""',
                  INDENT * 2 + "return held(x, encoding, self.emulate, channels)"]
    lines += ["", INDENT + "def reset_parameters(self):", INDENT * 2 + "pass", ""]
    lines += INIT_WEIGHTS.splitlines() + [""]
    lines += EXTRA_REPR.splitlines()
    for method in methods:
        if method:  # "": a block calling another block's method of the same code
            lines += [""] + method.rstrip("\n").splitlines()
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ClassParts:
    """What the source of one class is written from: the file's :class:`Generator` (symbol
    names, defaults), the class's :class:`ClassInfo`, its interface, needs and batch shape
    (:mod:`codegen.classstate`), sizes, members and forward's statements (with the names it
    returns, ``ret``, and the data-fixed sizes it derives, ``derivable``)."""

    gen: object
    info: ClassInfo
    iface: Interface
    needs: Needs
    batch: Batch
    sizes: object  # codegen.sizes.SizeCodes
    members: object  # codegen.members.Members
    forward: list  # Statements
    ret: list
    derivable: dict
    doc: str | None = None  # the docstring's text, where not the one of the interface


def class_source(c: ClassParts) -> str:
    """The class's source: docstring, class attributes, ``__init__``, ``reset_parameters``
    and ``forward``, every line wrapped; for a block holding nothing of its own
    (``info.method``), the base class's method of that name instead (:func:`method_source`)."""
    if c.info.method:
        return method_source(c)
    lines = [f"class {c.info.name}({BASE}):"]
    doc = c.doc or doc_text(c.iface, c.info.outputs)
    lit = docstring(doc, INDENT)
    check_docstring(lit, INDENT, doc)
    lines.append(INDENT + lit)
    lines.append("")
    lines.extend(expert_attribute_lines(c.gen, c.info, c.iface.selection))
    lines.extend(init_lines(c.gen, c.info, c.needs, c.sizes, c.members))
    lines.extend(forward_lines(c))
    return "\n".join(w for ln in lines for w in wrap_line(ln)) + "\n"


def method_source(c: ClassParts) -> str:
    """A block with no parameters, buffers or submodules as a method of the base class,
    ``self.<info.method>(...)``: its docstring, then ``forward``'s body under that name (it reads
    the caller's ``self.config`` and ``self.held``)."""
    doc = doc_text(c.iface, c.info.outputs)
    lit = docstring(doc, INDENT * 2)
    check_docstring(lit, INDENT * 2, doc)
    head, *body = forward_lines(c, c.info.method)
    return "\n".join(w for ln in [head, INDENT * 2 + lit, *body] for w in wrap_line(ln)) + "\n"


def method_code(source: str) -> str:
    """A method's code less its name and docstring: two blocks whose methods have the same
    share one (:meth:`codegen.lower.ClassBuilder._finish`)."""
    (fn,) = ast.parse(textwrap.dedent(source)).body
    body = fn.body[1:] if ast.get_docstring(fn) is not None else fn.body
    return ast.dump(fn.args) + "".join(ast.dump(st) for st in body)


def takes_config(info: ClassInfo) -> bool:
    """A class takes the file's config when it reads a size or constant (the root always)."""
    return bool(info.ctor_symbols) or info.key == "root"


def init_lines(gen, info: ClassInfo, needs: Needs, sizes, members) -> list[str]:
    """``__init__`` (allocation, sizes kept for forward) and ``reset_parameters``."""
    params = []
    if info.needs_quant:
        params.append(f"quant={gen.quant!r}")
    if info.needs_stand_in:
        params.append("stand_in=False")
    if info.needs_static:
        params.append("static_shapes=False")
    info.user_data = tuple(dict.fromkeys([*needs.user_data, *(
        t for m in info.members if isinstance(m, Sub) for c in (m.info, m.body) if c is not None
        for t in c.user_data)]))
    config = takes_config(info)
    sig = "self" + (", config" + ("" if info.arguments else "=None") if config else "")
    sig += "".join(", " + a for a in info.arguments)
    sig += ", *, " + ", ".join(params) if params else ""
    args = ["config"] if config else []
    if needs.quant:
        args.append("quant" if config else "quant=quant")
    init = [Statement(EXPR, f"super().__init__({', '.join(args)})")]
    if needs.static:
        init.append(Statement(ASSIGN, "static_shapes", ("self.static_shapes",)))
    if info.user_data and (info.key == "root" or needs.user_data):
        names = string_literal(", ".join(info.user_data))
        init.insert(0, Statement(EXPR, f"refuse_missing_data(stand_in, {names})"))
    if needs.user_data:
        init.append(Statement(ASSIGN, "stand_in", ("self.stand_in",)))
        init.append(Statement(EXPR, "self.register_load_state_dict_post_hook(data_loaded)"))
    init += members.init
    if members.reset:
        init.append(Statement(EXPR, "self.reset_parameters()"))
    lines = []
    if len(init) > 1 or params or info.arguments:  # else the base class's __init__ does it all
        lines = [INDENT + f"def __init__({sig}):", *print_body(init, INDENT * 2), ""]
    if members.reset or needs.user_data:
        reset = list(members.reset)
        if needs.user_data:
            reset.append(Statement(ASSIGN, "self.stand_in is not True", ("self.data_missing",)))
        lines += [INDENT + "def reset_parameters(self):", *print_body(reset, INDENT * 2), ""]
    return lines


def forward_lines(c: ClassParts, name: str = "forward") -> list[str]:
    """``forward`` (or the method ``name``): its signature, then the prologue, the lowered statements and the return,
    simplified (:func:`codegen.passes.simplify`) and printed."""
    gen, iface = c.gen, c.iface
    args = ["self"]
    optional = []  # root class: masks keyword-only, None = all live (codegen/boundary.py)
    for w, live in zip(iface.inputs, iface.input_masks, strict=False):
        args.append(w.var)
        if live is not None and iface.optional_masks:
            optional.append((w.var, live))
        elif live is not None:
            args.append(live)
    args += [n for _, _, names, _ in iface.tables for n in names]
    if iface.selection is not None:
        args.append(f"{iface.selection.pairs}=None")
    kw = [f"{live}: torch.Tensor | None = None" for _, live in optional]
    for s in c.info.kw_symbols:
        d = gen.default_of(s)
        kw.append(f"{gen.sym_name(s)}: int = {d}" if d is not None
                  else f"{gen.sym_name(s)}: int")
    if c.needs.tape:
        kw.append("tape: dict | None = None")
    sig = ", ".join(args) + (", *, " + ", ".join(kw) if kw else "")
    body = [s for var, live in optional for s in default_statements(var, live)]
    body += prologue(c)
    body += c.forward
    body.append(Statement(RETURN, ", ".join(c.ret) if c.ret else "()"))
    indent = INDENT * 2
    body = simplify(body, len(indent), frozenset(c.members.linears))
    return [INDENT + f"def {name}({sig}):"] + print_body(body, indent, INDENT)


def prologue(c: ClassParts) -> list[Statement]:
    """The forward's statements before the lowered ones: user data checked, the tape, the batch
    shape, sizes fixed by the data, the selection's pairs."""
    gen, iface, needs = c.gen, c.iface, c.needs
    out = []
    if needs.user_data:
        out.append(Statement(EXPR, f"require_data(self, {string_literal(', '.join(needs.user_data))})"))
    if needs.tape:
        out.append(Statement(ASSIGN, "{} if tape is None else tape", ("tape",)))
    if c.batch.used and c.batch.source is not None:
        shapes = [f"{w.var}.shape[:{w.var}.dim() - {w.rank}]" if w.rank else f"{w.var}.shape"
                  for w in iface.inputs]
        code = shapes[0] if len(shapes) == 1 else \
            f"torch.broadcast_shapes({', '.join(shapes)})"
        out.append(Statement(ASSIGN, code, ("lead",), comment="leading (batch) dims"))
    for sym, code in c.derivable.items():
        if sym in c.sizes.data_used:
            out.append(Statement(ASSIGN, code, (gen.sym_name(sym),), comment="fixed by the data"))
    if iface.selection is not None:
        sel = iface.selection
        out.append(Statement(ASSIGN, f"{sel.pairs} is None", (iface.all_pairs,)))
        out.append(Statement(IF, iface.all_pairs, comment=f"every (row, "
                             f"{comment_text(sel.axis.label, 20)}) pair, dense results"))
        every = f"{iface.inputs[0].var}.new_ones({iface.pairs_size}, dtype=torch.bool)"
        out.append(Statement(ASSIGN, f"live_pairs({every}, lead, {iface.pairs_size})",
                             (sel.pairs,), depth=1))
    return out


def doc_text(iface: Interface, outputs: list) -> str:
    """The class docstring: title, description, formula, inputs and outputs, masks, pairs."""
    parts = [plain_title(iface.title) or "Block"]
    if iface.description:
        parts.append(textwrap.fill(" ".join(iface.description.split()), 88))
    if iface.formula:
        parts.append(textwrap.fill("Formula: " + " ".join(iface.formula.split()), 88,
                                   break_long_words=False, break_on_hyphens=False))
    ins = ", ".join(f"{w.var}: {comment_text(str(w.array), 60)}" for w in iface.inputs)
    outs = ", ".join(comment_text(str(a), 60) for a, _, _ in outputs)
    parts.append(f"Inputs: {ins or 'none'}.\nReturns: {outs or 'nothing'}.")
    for _, _, names, _ in iface.tables:
        parts.append(f"{', '.join(f'`{n}`' for n in names)}: the rotary table"
                     f"{' (cos, sin)' if len(names) == 2 else ''},\ncomputed once per forward "
                     "by the caller.")
    masks = [w.var for w in iface.inputs if w.live is not None]
    if masks or any(st is not None for _, st, _ in outputs):
        parts.append("Arrays that can hold dead positions (docs/format.md §2.4) travel with a "
                     "bool mask `<name>_live`;\ndead positions hold 0.")
    if iface.selection is not None:
        axis = comment_text(iface.selection.axis.label, 20)
        parts.append(f"`{iface.selection.pairs}`: the live (row, {axis}) pairs of a selection "
                     f"(`live_pairs`). Arrays on {axis} are\ncomputed at those pairs only "
                     f"and returned as pairs arrays, one row per pair; without it\nevery "
                     "pair is computed and they are returned dense.")
    return "\n\n".join(parts)
