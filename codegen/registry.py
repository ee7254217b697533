"""One codegen rule per operator kind, registered by IR class.

A rule is ``rule(ctx) -> list[OpResult]``: given a :class:`codegen.ctx.Ctx` (the Broadcasted
being lowered, its operands read through their reindexings, the services of the class being
written) it emits the statements computing the operator and returns one result per output
weave. Rules live in :mod:`codegen.rules`, whose import registers them all.
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
