"""Operators that box a whole block (applied at every degree index)."""
from __future__ import annotations

from dataclasses import dataclass

from .base import Operator


@dataclass(frozen=True, eq=False)
class BlockOperator(Operator):
    """Apply ``block`` lifted over the Broadcasted's degree."""

    block: object = None


@dataclass(frozen=True, eq=False)
class ParaBlockOperator(Operator):
    """A BlockOperator whose block holds tape seeds exposed as ports: inputs are one per grab
    first, then the block's operands; outputs are the block's results, then one per drop."""

    block: object = None
    grabs: tuple = ()
    drops: tuple = ()
