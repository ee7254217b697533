"""Display names (pyncd ``DynamicName``): decoration only, never identity."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .frozen import quick_init

_TEXT = re.compile(r"\\(?:text|mathrm|mathbf|operatorname)\{([^{}]*)\}")


@quick_init
@dataclass(frozen=True)
class Name:
    """A LaTeX display name with optional subscript, exponent and code identifier."""

    body: str
    subscript: Name | None = None
    exponent: Name | None = None
    code_form: str | None = None
    absolute: bool = False

    @property
    def latex(self) -> str:
        out = self.body
        if self.subscript is not None:
            sub = self.subscript.latex
            out += "_" + (sub if sub.startswith("{") and sub.endswith("}") else "{" + sub + "}")
        return out

    @property
    def text(self) -> str:
        """Plain text: ``\\text{..}`` wrappers removed, subscript appended with ``_``."""
        return plain_title(self.latex)

    @property
    def default_value(self) -> int | None:
        """The integer the exponent states (pyncd writes released sizes there), if any."""
        if self.exponent is None:
            return None
        try:
            return int(self.exponent.body.replace(",", "").strip())
        except ValueError:
            return None

    def __str__(self) -> str:
        return self.text


_ESCAPED = re.compile(r"\\([&%#_$])")


def shown_text(title: str) -> str:
    """A title as a table prints it: LaTeX's escaped characters (``\\& \\% \\# \\_ \\$``) without
    their backslash; keys and ``--block`` queries keep :func:`plain_title`'s form."""
    return _ESCAPED.sub(r"\1", title)


@lru_cache(maxsize=4096)
def plain_title(latex: str) -> str:
    """``\\text{Mixing Coefficients}`` -> ``Mixing Coefficients``; other LaTeX left as is."""
    prev = None
    out = latex
    while prev != out:
        prev = out
        out = _TEXT.sub(r"\1", out)
    return out.strip()
