"""Identifiers and text for generated code: every piece of spec text that reaches the source goes
through here, as a sanitised identifier (ASCII, never a keyword), a single-line comment
fragment, or an escaped string literal.

Names are given by :class:`Namer` scopes that all start from :data:`RESERVED_NAMES` (keywords,
builtins, the file's imports and helpers): the file's classes, each class's attributes, each
function's locals, the size symbols (constructor arguments, attributes and locals at once).
"""
from __future__ import annotations

import ast
import builtins
import keyword
import re
from importlib import resources

import sympy

from ncdc.ir.axes import is_token_axis

_LATEX_WRAPPERS = re.compile(r"\\(?:text|mathrm|mathbf|mathit|operatorname|mathbbm|mathbb|"
                             r"mathcal|tfrac|frac|lvert|rvert|left|right)\b")
_COMMAND = re.compile(r"\\([A-Za-z]+)")
_NON_WORD = re.compile(r"[^0-9A-Za-z]+")

NN_MODULE_ATTRIBUTES = frozenset({
    "T_destination", "_apply", "_call_impl", "_compiled_call_impl", "_get_backward_hooks",
    "_get_backward_pre_hooks", "_get_name", "_load_from_state_dict",
    "_maybe_warn_non_full_backward_hook", "_named_members", "_register_load_state_dict_pre_hook",
    "_register_state_dict_hook", "_replicate_for_data_parallel", "_save_to_state_dict",
    "_slow_forward", "_version", "_wrapped_call_impl", "add_module", "apply", "bfloat16",
    "buffers", "call_super_init", "children", "compile", "cpu", "cuda", "double", "dump_patches",
    "eval", "extra_repr", "float", "forward", "get_buffer", "get_extra_state", "get_parameter",
    "get_submodule", "half", "ipu", "load_state_dict", "modules", "mtia", "named_buffers",
    "named_children", "named_modules", "named_parameters", "parameters", "register_backward_hook",
    "register_buffer", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_full_backward_pre_hook",
    "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook", "register_module",
    "register_parameter", "register_state_dict_post_hook", "register_state_dict_pre_hook",
    "requires_grad_", "set_extra_state", "set_submodule", "share_memory", "state_dict", "to",
    "to_empty", "train", "type", "xpu", "zero_grad"
})
"""``dir(torch.nn.Module)`` less dunders, at torch 2.13 (written out: importing the code generator
loads no torch; ``tests/test_codegen_names.py`` checks it against the installed torch)."""

# names every generated class already uses (nn.Module attributes, our own locals)
RESERVED_ATTRIBUTES = frozenset({
    "training", "forward", "state_dict", "parameters", "buffers", "children", "modules",
    "register_buffer", "register_parameter", "add_module", "apply", "cuda", "cpu", "to", "type",
    "float", "double", "half", "bfloat16", "train", "eval", "zero_grad", "extra_repr", "dump_patches",
    "call_super_init", "quant", "emulate", "static_shapes", "dtype", "get_submodule", "get_parameter",
    "get_buffer", "named_parameters", "named_buffers", "named_children", "named_modules",
    "load_state_dict", "requires_grad_", "share_memory", "ipu", "xpu", "mtia", "compile",
    "reset_parameters", "stand_in", "data_missing", "held", "config",
}) | NN_MODULE_ATTRIBUTES


PRELUDES = ("linear", "storage", "quant", "views", "pairs", "fixed")
"""The modules of ``codegen/prelude`` that may be pasted into a generated file."""


def _prelude_names() -> frozenset:
    """Every top-level name a prelude defines (functions, classes, constants)."""
    out = set()
    for name in PRELUDES:
        text = resources.files("ncdc.codegen").joinpath("prelude", f"{name}.py").read_text("utf-8")
        for node in ast.parse(text).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, ast.Assign):
                out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return frozenset(out)


FILE_GLOBALS = frozenset({"torch", "nn", "F", "math", "functools", "warnings", "dataclass",
                          "PARAM_KEYS", "PARAM_LAYOUT", "load_interpreter_params",
                          "Module"}) | _prelude_names()
"""Names every generated file may define or import at module level besides its classes."""

RESERVED_NAMES = (frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
                  | frozenset(dir(builtins)) | FILE_GLOBALS | {"self", "cls"})
"""Names no identifier from spec text may take, in any scope."""

FORWARD_LOCALS = frozenset({"lead", "tape"})
"""Locals every ``forward`` may define itself."""

CONSTRUCTOR_ARGUMENTS = frozenset({"quant", "stand_in", "config", "static_shapes"})
"""Keyword arguments of generated constructors besides the sizes."""

_ABS = re.compile(r"\\lvert(.*?)\\rvert")


def words(text: str) -> list[str]:
    """The alphanumeric words of a (LaTeX) label: ``W^{Qa}`` -> ``['W', 'Qa']``,
    ``\\varepsilon_{\\mathrm{hc}}`` -> ``['varepsilon', 'hc']``."""
    text = _ABS.sub(r" abs \1 ", text or "")
    text = text.replace("\\ulcorner", " clamp ").replace("\\lrcorner", " ")
    text = _LATEX_WRAPPERS.sub(" ", text)
    text = _COMMAND.sub(r" \1 ", text)
    return [w for w in _NON_WORD.split(text) if w]


def identifier(text: str, fallback: str = "value", lower: bool = True) -> str:
    """A valid Python identifier (snake case) from spec text; never a keyword."""
    parts = words(text)
    out = "_".join(p.lower() if lower else p for p in parts) or fallback
    if out[0].isdigit():
        out = f"{fallback}_{out}"
    if keyword.iskeyword(out) or keyword.issoftkeyword(out) or out in RESERVED_NAMES:
        out += "_"
    return out


def field_base(sym, qualified: str | None = None) -> str:
    """The config field name of a size or constant symbol: its ``code_form`` where the diagram
    gives one, less a ``_size`` suffix when what is left names it (a compound name or a plural
    count: ``hidden_width``, ``heads``; a lone singular word keeps it: ``window_size``);
    otherwise its readable name (``qualified``, such as ``k@L_{q}`` for one of two symbols
    labelled ``k``, where the qualifier is short, else its label) as an identifier, case kept
    (``T_1``, ``hat_v``, ``k_L_q``)."""
    form = sym.code_form
    if form:
        rest = form.removesuffix("_size")
        if rest != form and ("_" in rest or rest.endswith("s")):
            form = rest
        return identifier(form, "size")
    text = sym.label
    if qualified and "@" in qualified and len(words(qualified.split("@", 1)[1])) <= 3:
        text = qualified  # a short qualifier (a block title); a long one reads worse than _2
    return identifier(text, "size", lower=False)


def array_name(array) -> str:
    """A forward argument's name from the roles of its axes: each axis's ``code_form`` (less
    ``_size`` and ``_width``: ``hidden``, ``streams``, ``latent``), else the code form of its
    size (the window ``w|x`` is ``window``), else its label, the token
    axis left out when others follow it (every array has it), a repeated role once:
    ``[x, n, m]`` -> ``streams_hidden``, ``[x]`` -> ``tokens``, ``[n, n]`` -> ``streams``."""
    if not array.shape:
        return "scalar"
    parts: list[str] = []
    for axis in array.shape:
        if is_token_axis(axis) and len(array.shape) > 1:
            continue
        form = axis.name.code_form if axis.name is not None else None
        if not form and isinstance(axis.size, sympy.Symbol):  # a window w|x: its size's role
            form = getattr(axis.size, "code_form", None)
        word = (identifier(form.removesuffix("_size").removesuffix("_width"), "axis") if form
                else identifier(axis.label, "axis"))
        if word not in parts:
            parts.append(word)
    return identifier("_".join(parts) or "tokens", "array")


def field_names(symbols, qualified: dict | None = None) -> dict:
    """Each symbol -> its config field name (:func:`field_base`), distinct, never a name a
    generated class already uses; ``qualified``: symbol -> readable name."""
    qualified = qualified or {}
    namer = Namer(RESERVED_ATTRIBUTES | FORWARD_LOCALS | CONSTRUCTOR_ARGUMENTS)
    bases = {s: field_base(s, qualified.get(s)) for s in set(symbols)}
    return {s: namer.fresh(bases[s]) for s in sorted(bases, key=lambda s: (bases[s], s.uid))}


def class_name(title: str, fallback: str = "Block") -> str:
    """CamelCase class name from a block title: ``Single-Pass mHC`` -> ``SinglePassMHC``."""
    parts = words(title)
    out = "".join(p[:1].upper() + p[1:] for p in parts) or fallback
    if out[0].isdigit():
        out = fallback + out
    if keyword.iskeyword(out) or out in RESERVED_NAMES:
        out += "_"
    return out


def initials(title: str) -> str:
    """A short class-name part for a title: its words' initials (``Mixture of Experts`` ->
    ``MoE``), or the one word itself."""
    parts = words(title)
    if len(parts) == 1:
        return class_name(title)
    return "".join(p[:1] for p in parts if p[:1].isalnum())


def distinct_class_name(title: str, parts: list[str], same_title: list[set[str]],
                        taken: set[str]) -> str:
    """The class name for a block titled ``title`` whose sub-blocks are titled ``parts`` (body
    order), when blocks of the same title already have classes (their sub-block titles in
    ``same_title``): the title's name, followed, for a second body under one title, by the
    initials of the first sub-block the others lack (``SinglePassMHC`` and ``SinglePassMHCMoE``).
    The caller's namer still makes it unique."""
    base = class_name(title)
    if not same_title:
        return base
    seen = set().union(*same_title)
    for part in parts:
        if part not in seen:
            name = base + initials(part)
            if name.isidentifier() and name not in taken:
                return name
    return base


def snake_case(name: str) -> str:
    """``FirstSinkhornRound`` -> ``first_sinkhorn_round``; ``SinglePassMHC`` -> ``single_pass_mhc``."""
    out = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    return identifier(out, "block")


def attribute_name(name: str, title: str) -> str:
    """The snake-case attribute for class ``name`` of a block titled ``title``: a part the class
    name adds to the title's (``SinglePassMHC`` + ``MoE``) stays one word, ``single_pass_mhc_moe``."""
    base = class_name(title)
    rest = name[len(base):]
    if name.startswith(base) and rest and not rest.isdigit():
        return identifier(f"{snake_case(base)}_{rest.lower()}", "block")
    return snake_case(name)


class Namer:
    """Deterministic deduplication within one namespace: ``name``, ``name_2``, ``name_3``...;
    never one of :data:`RESERVED_NAMES` (a reserved base gets a trailing ``_`` first)."""

    def __init__(self, taken=()):
        self.taken: set[str] = set(taken) | RESERVED_NAMES

    def fresh(self, base: str, sep: str = "_") -> str:
        if base in RESERVED_NAMES and base + "_" not in self.taken:
            base += "_"
        if base not in self.taken:
            self.taken.add(base)
            return base
        k = 2
        while f"{base}{sep}{k}" in self.taken:
            k += 1
        name = f"{base}{sep}{k}"
        self.taken.add(name)
        return name

    def reserve(self, name: str) -> None:
        self.taken.add(name)


def comment_text(text: str, limit: int = 90) -> str:
    """Spec text made safe for a one-line comment: printable ASCII only, no line breaks."""
    flat = " ".join(str(text or "").split())
    safe = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in flat)
    if len(safe) > limit:
        safe = safe[:limit - 3].rstrip() + "..."
    return safe


def _raw_safe(text: str) -> bool:
    """True when ``r\"\"\"text\"\"\"`` is a faithful literal: printable characters and line
    breaks only, no triple quote, no closing quote or backslash at the end, no trailing
    blanks on a line."""
    if '"""' in text or text.endswith(('"', "\\")) or "\r" in text:
        return False
    if any(not line.isprintable() or line != line.rstrip() for line in text.split("\n")):
        return False
    return not any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


def no_surrogates(text: str) -> str:
    """``text`` with every lone surrogate written out as its ``\\udXXX`` escape (a class
    docstring must be encodable as UTF-8)."""
    return re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text)


def docstring(text: str, indent: str) -> str:
    """A triple-quoted docstring literal that evaluates exactly to ``text``, indented for a
    class body: a raw string with the text as written (LaTeX backslashes, ``§``) where that is
    faithful, else an escaped one (backslashes, quotes and non-printable characters). Lone
    surrogates are spelled out (:func:`no_surrogates`)."""
    text = no_surrogates(text)
    if _raw_safe(text):
        lines = text.split("\n")
        if len(lines) == 1:
            return f'r"""{lines[0]}"""'
        return 'r"""' + lines[0] + "\n" + "\n".join(
            (indent + ln) if ln else "" for ln in lines[1:]) + "\n" + indent + '"""'
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\n")
        elif 32 <= code < 127:
            out.append(ch)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    body = "".join(out)
    lines = body.split("\n")
    # trailing whitespace on lines would trip linters; keep it escaped instead
    lines = [ln.rstrip(" ") + ("\\x20" * (len(ln) - len(ln.rstrip(" ")))) for ln in lines]
    if len(lines) == 1:
        literal = f'"""{lines[0]}"""'
    else:
        literal = '"""' + lines[0] + "\n" + "\n".join(
            (indent + ln) if ln else "" for ln in lines[1:]) + "\n" + indent + '"""'
    return literal


def check_docstring(literal: str, indent: str, text: str) -> None:
    """Assert the literal evaluates to the dedented text (defence in depth)."""
    value = ast.literal_eval(literal)
    expected_lines = no_surrogates(text).split("\n")
    got_lines = value.split("\n")
    if len(text.split("\n")) > 1:
        got_lines = [got_lines[0]] + [ln.removeprefix(indent)
                                      for ln in got_lines[1:-1]]
    if got_lines != expected_lines:
        raise AssertionError("docstring escaping is not faithful")


def string_literal(text: str) -> str:
    """An escaped single-line, ASCII-only string literal (lone surrogates included)."""
    return ascii(str(text))


def formula_name(expr, x) -> str | None:  # noqa: C901 - one naming rule per branch, tried in order
    """A local name for the result of a pointwise formula in ``x``, from the operation it
    performs rather than the label's letters: ``x + ε`` is ``shifted``, ``x / 448`` ``scaled``,
    ``1 / x`` ``reciprocal``, a clamp ``clamped``, ``x σ(x)`` ``silu``; None when no rule names
    it (the caller falls back to the label)."""
    if not getattr(expr, "has", None) or not expr.has(x) or expr == x:
        return None
    fn = {sympy.exp: "exp", sympy.Abs: "magnitude", sympy.conjugate: "conjugate",
          sympy.log: "log", sympy.sqrt: "sqrt"}
    if expr == sympy.log(x) / sympy.log(2):
        return "log2"
    if expr.is_Add:
        _, dep = expr.as_independent(x, as_Add=True)
        if dep == x:
            return "shifted"
    if expr.is_Mul:
        _, dep = expr.as_independent(x, as_Add=False)
        if dep == x:
            return "scaled"
        if dep.is_Mul and len(dep.args) == 2 and x in dep.args:
            other = dep.args[0] if dep.args[1] == x else dep.args[1]
            if type(other).__name__ == "Sigmoid" and other.args == (x,):
                return "silu"
        if dep != expr:
            return formula_name(dep, x)
    if expr == 1 / x:
        return "reciprocal"
    if expr.is_Pow and expr.exp == x and expr.base.is_number:
        return "power_of_2" if expr.base == 2 else "power"
    if expr.is_Pow and expr.exp == sympy.Rational(1, 2):
        inner = formula_name(expr.base, x)
        return f"sqrt_{inner}" if inner else "sqrt"
    if expr == sympy.log(sympy.exp(x) + 1):
        return "softplus"
    if expr.atoms(sympy.Max, sympy.Min) and not (expr.atoms(sympy.Function)
                                                 - expr.atoms(sympy.Max, sympy.Min)):
        return "clamped"
    if expr.is_Mul or expr.is_Pow:
        return None
    if isinstance(expr, sympy.Function) and expr.args == (x,):
        name = type(expr).__name__
        return {"Sigmoid": "sigmoid", "IsPositive": "is_positive"}.get(name, fn.get(expr.func))
    return None
