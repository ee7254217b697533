"""Base class of operators (what a ``Broadcasted`` computes on its target arrays)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..names import Name


@dataclass(frozen=True, eq=False)
class Operator:
    """Every operator has a display name (never read by the semantics) and its JSON path."""

    name: Name | None = None
    path: str = field(default="", compare=False, repr=False, kw_only=True)

    @property
    def label(self) -> str:
        return self.name.text if self.name is not None else ""

    @property
    def kind(self) -> str:
        return type(self).__name__
