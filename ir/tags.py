"""Block tags: title, description, formula, references and the repetition count."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import sympy

from .frozen import quick_init
from .names import Name, plain_title


class BlockDrawing(enum.Enum):
    BOX = "BOX"
    BODY_IN_PLACE = "BODY_IN_PLACE"


@quick_init
@dataclass(frozen=True)
class CodeReference:
    label: str | None
    url: str | None
    path: str | None
    line: int | None
    end_line: int | None


@quick_init
@dataclass(frozen=True, eq=False)
class BlockTag:
    """The label of a block. Only ``repetition`` (and its loop counter) affect numerics."""

    uid: int
    counter: Name | None
    repetition: sympy.Expr
    title: str
    description: str | None = None
    formula: str | None = None
    fill_color: str | None = None
    references: tuple[CodeReference, ...] = ()
    drawing: BlockDrawing | None = None
    path: str = field(default="", compare=False, repr=False)

    def __eq__(self, other):
        return isinstance(other, BlockTag) and other.uid == self.uid

    def __hash__(self):
        return hash(("tag", self.uid))

    @property
    def plain_title(self) -> str:
        return plain_title(self.title)


@quick_init
@dataclass(frozen=True, eq=False)
class TapeSlot:
    """A named slot of the tape (identity = uid)."""

    uid: int
    name: Name | None
    path: str = field(default="", compare=False, repr=False)

    def __eq__(self, other):
        return isinstance(other, TapeSlot) and other.uid == self.uid

    def __hash__(self):
        return hash(("tape", self.uid))

    @property
    def label(self) -> str:
        return self.name.text if self.name is not None else f"slot{self.uid}"
