"""Codegen rules, one module per operator family; importing this package registers them all in
:data:`codegen.registry.RULES`."""
from __future__ import annotations

from ..registry import RULES
from . import (  # noqa: F401  (imported to register their rules)
    boxes,
    contraction,
    elementwise,
    folds,
    legacy,
    normalisation,
    positions,
    selection,
    sources,
    tensorlogic,
    views,
)


def load_rules() -> dict:
    """Every registered rule, by IR operator class."""
    return RULES


__all__ = ["RULES", "load_rules"]
