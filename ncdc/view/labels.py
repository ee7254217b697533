"""Text of the picture: titles and operator names as plain Unicode, and operator labels by
meaning.

- ``plain_label``: LaTeX made readable (``\\sigma`` → ``σ``, ``H_{0}`` → ``H₀``,
  ``\\text{Add \\& Norm}`` → ``Add & Norm``); a subscript with no Unicode form stays ``_q``
  (the page draws it lowered).
- ``is_math``: whether a title is LaTeX worth typesetting (not a ``\\text{…}`` wrapper around
  words); only those are rendered as mathematics in the side panel.
- ``operator_label``: an operator by what it computes (``+``, ``Σ einsum``, ``softmax``,
  ``RMSNorm``, ``top-k``): the ``shown`` label its IR class's descriptor gives
  (``ir/operators``).
"""
from __future__ import annotations

import re
from functools import lru_cache

from ncdc.ir.names import plain_title

GREEK = {
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ϵ", "varepsilon": "ε",
    "zeta": "ζ", "eta": "η", "theta": "θ", "vartheta": "ϑ", "iota": "ι", "kappa": "κ",
    "lambda": "λ", "mu": "μ", "nu": "ν", "xi": "ξ", "pi": "π", "rho": "ρ", "sigma": "σ",
    "tau": "τ", "upsilon": "υ", "phi": "ϕ", "varphi": "φ", "chi": "χ", "psi": "ψ",
    "omega": "ω", "Gamma": "Γ", "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ", "Xi": "Ξ",
    "Pi": "Π", "Sigma": "Σ", "Phi": "Φ", "Psi": "Ψ", "Omega": "Ω",
}
SYMBOLS = {
    "cdot": "·", "times": "×", "odot": "⊙", "otimes": "⊗", "oplus": "⊕", "sum": "∑",
    "prod": "∏", "sqrt": "√", "infty": "∞", "leq": "≤", "geq": "≥", "le": "≤", "ge": "≥",
    "neq": "≠", "to": "→", "rightarrow": "→", "leftarrow": "←", "mapsto": "↦", "in": "∈",
    "lceil": "⌈", "rceil": "⌉", "lfloor": "⌊", "rfloor": "⌋", "ldots": "…", "cdots": "⋯",
    "langle": "⟨", "rangle": "⟩", "vert": "|", "mid": "|", "circ": "∘", "partial": "∂",
    "nabla": "∇", "exp": "exp", "log": "log", "max": "max", "min": "min", "top": "⊤",
    "quad": " ", "qquad": "  ", ",": " ", ";": " ", "!": "", " ": " ", "lvert": "|",
    "rvert": "|", "Vert": "‖", "lVert": "‖", "rVert": "‖", "bmod": "mod", "ulcorner": "⌜",
    "lrcorner": "⌟", "llcorner": "⌞", "urcorner": "⌝", "pm": "±", "approx": "≈",
}
SUB = dict(zip("0123456789+-=()aeoxhklmnpstijruv", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₕₖₗₘₙₚₛₜᵢⱼᵣᵤᵥ", strict=True))
SUP = dict(zip("0123456789+-=()nijkT", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱʲᵏᵀ", strict=True))

_STYLE = re.compile(r"\\(?:text|mathrm|mathbf|mathit|mathsf|mathtt|operatorname|boldsymbol|"
                    r"mathcal|mathbb|mathbbm|hat|tilde|bar|overline|widehat|vec)\s*\{([^{}]*)\}")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_CMD = re.compile(r"\\([A-Za-z]+|[,;! ])")
_SCRIPT = re.compile(r"([_^])(?:\{([^{}]*)\}|(\\?[A-Za-z0-9]))")


def _script(mark: str, body: str) -> str:
    table = SUB if mark == "_" else SUP
    if body and all(c in table for c in body):
        return "".join(table[c] for c in body)
    return mark + "{" + body + "}"  # braces stop a second pass; they are dropped at the end


@lru_cache(maxsize=8192)
def plain_label(latex: str) -> str:
    """Readable Unicode for a LaTeX label (unknown commands keep their name; escaped
    characters ``\\& \\% \\# \\_ \\$`` lose their backslash)."""
    text = plain_title(latex or "")
    text = re.sub(r"\\([&%#_$])", r"\1", text)
    prev = None
    while prev != text:
        prev = text
        text = _STYLE.sub(r"\1", text)
        text = _FRAC.sub(r"\1/\2", text)
    text = _CMD.sub(lambda m: GREEK.get(m.group(1)) or SYMBOLS.get(m.group(1), m.group(1)),
                    text)
    prev = None
    while prev != text:
        prev = text
        text = _SCRIPT.sub(lambda m: _script(m.group(1), m.group(2) if m.group(2) is not None
                                             else m.group(3)), text)
    text = text.replace("\\left", "").replace("\\right", "")
    text = re.sub(r"(?<!\\)[{}]", "", text)
    return re.sub(r"\s+", " ", text).strip()


_WORDS = re.compile(r"\\(?:text|mathrm|operatorname)\{[^{}]*\}|\\[&%#$_]")


def is_math(latex: str) -> bool:
    """True when ``latex`` holds mathematics beyond ``\\text{…}`` words and escaped
    characters: a command, a sub/superscript or a brace group."""
    rest = _WORDS.sub("", latex or "")
    return bool(re.search(r"[\\^_{}]", rest))


def operator_label(op) -> str:
    """The picture's label of an operator: what its descriptor shows (the class name for an
    object that is no IR operator)."""
    return getattr(op, "shown", "") or type(op).__name__


__all__ = ["is_math", "operator_label", "plain_label"]
