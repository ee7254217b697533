"""Arrays (datatype + ordered axes) and weaves (arrays with TILED degree slots)."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from .axes import Axis
from .datatypes import Datatype, compatible
from .frozen import cached_property, quick_init


class WeaveMode(enum.Enum):
    TILED = "TILED"


TILED = WeaveMode.TILED


@quick_init
@dataclass(frozen=True)
class Array:
    """An array type. Positional: the same axis may occur twice."""

    datatype: Datatype
    shape: tuple[Axis, ...]

    def __str__(self):
        return f"{self.datatype}[{', '.join(a.label for a in self.shape)}]"

    def matches(self, other: Array) -> bool:
        """Same axes (by uid, in order) and compatible datatypes (docs/format.md §2.5)."""
        return self.shape == other.shape and compatible(self.datatype, other.datatype)


@quick_init
@dataclass(frozen=True)
class Weave:
    """An operator port: target axes plus TILED slots filled by the degree."""

    datatype: Datatype
    shape: tuple[Axis | WeaveMode, ...]

    @cached_property
    def target(self) -> tuple[Axis, ...]:
        return tuple(a for a in self.shape if a is not TILED)

    @cached_property
    def tiled_count(self) -> int:
        return sum(1 for a in self.shape if a is TILED)

    @cached_property
    def tiled_positions(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.shape) if a is TILED)

    @cached_property
    def target_positions(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.shape) if a is not TILED)

    def fill(self, axes: tuple[Axis, ...]) -> Array:
        """The array obtained by filling the TILED slots, in order, with ``axes``."""
        it = iter(axes)
        return Array(self.datatype, tuple(next(it) if a is TILED else a for a in self.shape))

    def target_array(self) -> Array:
        return Array(self.datatype, self.target)

    def __str__(self):
        return f"{self.datatype}[{', '.join('*' if a is TILED else a.label for a in self.shape)}]"


@quick_init
@dataclass(frozen=True)
class ProdObject:
    """A tuple of axes (``Broadcasted.backup_degree``)."""

    content: tuple[Axis, ...]
