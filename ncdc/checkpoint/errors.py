"""Typed errors of checkpoint loading: a map that cannot be read is a usage problem (exit 2);
tensors that do not fit the model are a problem with the checkpoint (exit 1)."""
from __future__ import annotations

from ncdc.ir.errors import EvaluationError, UsageError


class MapError(UsageError):
    """A checkpoint map that is not valid: unreadable, unknown keys, a bad regex or
    transform; names the map file and the rule."""


class CheckpointError(EvaluationError):
    """Checkpoint tensors that do not fit the model: missing, unmapped, or of the wrong shape
    or dtype; names the tensor, the map rule and what was expected."""


def listing(items, limit: int = 12) -> str:
    """``a, b, c ... (and N more)``: a list named all at once, cut at ``limit`` items."""
    items = list(items)
    text = ", ".join(f"'{x}'" for x in items[:limit])
    return text + (f" ... (and {len(items) - limit} more)" if len(items) > limit else "")


__all__ = ["CheckpointError", "MapError", "listing"]
