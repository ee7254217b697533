"""The source text of one generated class: docstring, ``__init__`` signature and body, ``forward``
signature, prologue (batch shape, data-fixed sizes, pairs) and the lowered statements."""
from __future__ import annotations

import textwrap

from ncdc.ir.names import plain_title

from .boundary import default_lines
from .classinfo import INDENT
from .emit import drop_unused, fold_casts, fold_masks, return_directly, wrap_line
from .experts import expert_attribute_lines
from .names import check_docstring, comment_text, docstring, string_literal

BASE = "Module"
"""The base class of every generated class (:func:`base_class_source`)."""


def base_class_source(rounds: bool) -> str:
    """The generated file's base class: an empty ``reset_parameters`` (a class with parameters
    of its own overrides it) and, where the file rounds (``rounds``), the ``quant`` switch and
    ``self.held(x, encoding)``: the value as held in its storage format in emulate mode, ``x``
    itself in exact mode."""
    doc = ("Base of the blocks below. ``reset_parameters`` sets a block's own parameters "
           "(none here)")
    doc += (';\n    ``quant="emulate"`` rounds every value to its storage format, ``"exact"`` '
            'never rounds."""' if rounds else '."""')
    lines = [f"class {BASE}(nn.Module):", INDENT + '"""' + doc, ""]
    if rounds:
        lines += [INDENT + 'def __init__(self, quant="exact"):',
                  INDENT * 2 + "super().__init__()",
                  INDENT * 2 + 'self.emulate = quant == "emulate"',
                  "",
                  INDENT + "def held(self, x, encoding, channels=None):",
                  INDENT * 2 + '"""``x`` as held in ``encoding`` (MX blocks of ``channels``) '
                  'in emulate mode, else ``x``."""',
                  INDENT * 2 + "return held(x, encoding, self.emulate, channels)",
                  ""]
    lines += [INDENT + "def reset_parameters(self):", INDENT * 2 + "pass"]
    return "\n".join(lines) + "\n"


def class_source(cb, ret: list[str], derivable: dict) -> str:
    gen, info = cb.gen, cb.info
    lines = [f"class {info.name}({BASE}):"]
    doc = doc_text(cb)
    lit = docstring(doc, INDENT)
    check_docstring(lit, INDENT, doc)
    lines.append(INDENT + lit)
    lines.append("")
    lines.extend(expert_attribute_lines(cb))
    params = []
    for s in info.ctor_symbols:
        d = gen.default_of(s)
        params.append(f"{gen.sym_name(s)}={d}" if d is not None else gen.sym_name(s))
    if info.needs_quant:
        params.append(f"quant={gen.quant!r}")
    if info.needs_stand_in:
        params.append("stand_in=False")
    if info.needs_static:
        params.append("static_shapes=False")
    sig = "self" + (", *, " + ", ".join(params) if params else "")
    lines.append(INDENT + f"def __init__({sig}):")
    lines.append(INDENT * 2 + f"super().__init__({'quant' if cb.needs_quant else ''})")
    kept = [gen.sym_name(s) for s in sorted(cb.sizes.fwd_symbols, key=gen.sym_name)]
    if kept:  # the sizes forward reads, in one statement
        lines.append(INDENT * 2 + ", ".join(f"self.{n}" for n in kept) + " = "
                     + ", ".join(kept))
    if cb.needs_static:
        lines.append(INDENT * 2 + "self.static_shapes = static_shapes")
    if cb.user_data:
        lines.append(INDENT * 2 + "self.stand_in = stand_in")
        lines.append(INDENT * 2 + "self.register_load_state_dict_post_hook(data_loaded)")
    lines.extend(cb.members.init_lines)
    if cb.members.reset_lines:
        lines.append(INDENT * 2 + "self.reset_parameters()")
    lines.append("")
    if cb.members.reset_lines or cb.user_data:
        lines.append(INDENT + "def reset_parameters(self):")
        lines.extend(cb.members.reset_lines)
        if cb.user_data:
            lines.append(INDENT * 2 + "self.data_missing = not self.stand_in")
        lines.append("")
    args = ["self"]
    optional = []  # root class: masks keyword-only, None = all live (codegen/boundary.py)
    for w, live in zip(cb.inputs, cb.input_masks):
        args.append(w.var)
        if live is not None and cb.optional_masks:
            optional.append((w.var, live))
        elif live is not None:
            args.append(live)
    if cb.selection is not None:
        args.append(f"{cb.selection.pairs}=None")
    kw = [f"{live}: torch.Tensor | None = None" for _, live in optional]
    for s in info.kw_symbols:
        d = gen.default_of(s)
        kw.append(f"{gen.sym_name(s)}: int = {d}" if d is not None
                  else f"{gen.sym_name(s)}: int")
    if cb.uses_tape:
        kw.append("tape: dict | None = None")
    sig = ", ".join(args) + (", *, " + ", ".join(kw) if kw else "")
    head = INDENT + f"def forward({sig}):"
    lines.append(head)
    body = [INDENT * 2 + ln for var, live in optional for ln in default_lines(var, live)]
    if cb.user_data:
        body.append(INDENT * 2 + f"require_data(self, {string_literal(', '.join(cb.user_data))})")
    if cb.uses_tape:
        body.append(INDENT * 2 + "tape = {} if tape is None else tape")
    if cb.lead_used and cb.lead_source is not None:
        shapes = [f"{w.var}.shape[:{w.var}.dim() - {w.rank}]" if w.rank else f"{w.var}.shape"
                  for w in cb.inputs]
        code = shapes[0] if len(shapes) == 1 else \
            f"torch.broadcast_shapes({', '.join(shapes)})"
        body.append(INDENT * 2 + f"lead = {code}" + "  # leading (batch) dims")
    for sym, code in derivable.items():
        if sym in cb.sizes.data_used:
            body.append(INDENT * 2 + f"{gen.sym_name(sym)} = {code}"
                        + "  # fixed by the data")
    if cb.selection is not None:
        sel = cb.selection
        body.append(INDENT * 2 + f"{cb.all_pairs} = {sel.pairs} is None")
        body.append(INDENT * 2 + f"if {cb.all_pairs}:  # every (row, "
                    f"{comment_text(sel.axis.label, 20)}) pair, dense results")
        body.append(INDENT * 3 + f"{sel.pairs} = every_pair(lead, {cb._pairs_size}, "
                    f"{cb.inputs[0].var}.device)")
    body.extend(cb.fw.lines)
    if not ret:
        body.append(INDENT * 2 + "return ()")
    elif len(ret) == 1:
        body.append(INDENT * 2 + f"return {ret[0]}")
    else:
        body.append(INDENT * 2 + "return " + ", ".join(ret))
    body = return_directly(fold_casts(fold_masks(drop_unused(body, keep=set()))))
    lines.extend(body)
    return "\n".join(w for ln in lines for w in wrap_line(ln)) + "\n"

def doc_text(cb) -> str:
    parts = [plain_title(cb.title) or "Block"]
    if cb.description:
        parts.append(textwrap.fill(" ".join(cb.description.split()), 88))
    if cb.formula:
        parts.append(textwrap.fill("Formula: " + " ".join(cb.formula.split()), 88,
                                   break_long_words=False, break_on_hyphens=False))
    ins = ", ".join(f"{w.var}: {comment_text(str(w.array), 60)}" for w in cb.inputs)
    outs = ", ".join(comment_text(str(a), 60) for a, _, _ in cb.info.outputs)
    parts.append(f"Inputs: {ins or 'none'}.\nReturns: {outs or 'nothing'}.")
    masks = [w.var for w in cb.inputs if w.live is not None]
    if masks or any(st is not None for _, st, _ in cb.info.outputs):
        parts.append("Arrays that can hold dead positions (docs/format.md §2.4) travel with a "
                     "bool mask `<name>_live`;\ndead positions hold 0.")
    if cb.selection is not None:
        axis = comment_text(cb.selection.axis.label, 20)
        parts.append(f"`{cb.selection.pairs}`: the live (row, {axis}) pairs of a selection "
                     f"(`live_pairs`). Arrays on {axis} are\ncomputed at those pairs only "
                     f"and returned as pairs arrays, one row per pair; without it\nevery "
                     "pair is computed and they are returned dense.")
    return "\n\n".join(parts)
