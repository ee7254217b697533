"""One codegen rule per operator kind, registered by IR class.

A rule is ``rule(ctx) -> list[OpResult]``: given a :class:`codegen.broadcast.Ctx` (the
Broadcasted being lowered, its operands read through their reindexings, helpers to emit code) it
emits the statements computing the operator and returns one result per output weave.
"""
from __future__ import annotations

from collections.abc import Callable

RULES: dict[type, Callable] = {}


def rule(*classes: type):
    def deco(fn):
        for cls in classes:
            if cls in RULES:
                raise RuntimeError(f"two codegen rules for {cls.__name__}")
            RULES[cls] = fn
        return fn

    return deco


def load_rules() -> dict[type, Callable]:
    """Import every rule module (registration happens at import)."""
    from .rules import (  # noqa: F401
        boxes,
        contraction,
        elementwise,
        folds,
        legacy,
        normalisation,
        selection,
        sources,
        tensorlogic,
        views,
    )

    return RULES
