"""Box labels as plain Unicode: the LaTeX of titles and operator names, made readable in a
picture (``\\sigma`` → ``σ``, ``H_{0}`` → ``H₀``, ``x + \\varepsilon_{hc}`` → ``x + ε_hc``).
The side panel renders the full LaTeX as mathematics; this is only the box text."""
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
    "quad": " ", "qquad": "  ", ",": " ", ";": " ", "!": "", " ": " ",
}
SUB = dict(zip("0123456789+-=()aeoxhklmnpstijruv", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₕₖₗₘₙₚₛₜᵢⱼᵣᵤᵥ"))
SUP = dict(zip("0123456789+-=()nijkT", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱʲᵏᵀ"))

_STYLE = re.compile(r"\\(?:text|mathrm|mathbf|mathit|mathsf|mathtt|operatorname|boldsymbol|"
                    r"mathcal|mathbb|hat|tilde|bar|overline|widehat|vec)\s*\{([^{}]*)\}")
_CMD = re.compile(r"\\([A-Za-z]+|[,;! ])")
_SCRIPT = re.compile(r"([_^])(?:\{([^{}]*)\}|(\\?[A-Za-z0-9]))")


def _script(mark: str, body: str) -> str:
    table = SUB if mark == "_" else SUP
    if body and all(c in table for c in body):
        return "".join(table[c] for c in body)
    return mark + "{" + body + "}"  # braces stop a second pass; they are dropped at the end


@lru_cache(maxsize=8192)
def plain_label(latex: str) -> str:
    """Readable Unicode for a LaTeX label (unknown commands keep their name)."""
    text = plain_title(latex or "")
    prev = None
    while prev != text:
        prev = text
        text = _STYLE.sub(r"\1", text)
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


__all__ = ["plain_label"]
