"""Selections: top-k and what reads through a selection."""
from __future__ import annotations

import enum
from dataclasses import dataclass

import sympy

from .base import Operator


class SelectionForm(enum.Enum):
    WEIGHTS = "WEIGHTS"
    WEIGHTS_SELECT = "WEIGHTS_SELECT"
    ONLY_WEIGHTS = "ONLY_WEIGHTS"
    ONLY_SELECTION = "ONLY_SELECTION"


@dataclass(frozen=True, eq=False)
class TopK(Operator):
    """Keep the ``k`` largest live values of the one target axis (form WEIGHTS: in place, the
    rest dead)."""

    k: sympy.Expr = sympy.Integer(1)
    form: SelectionForm = SelectionForm.WEIGHTS


@dataclass(frozen=True, eq=False)
class Select(Operator):
    """WEIGHTS form: ``out[j] = w[j] * p[j]`` at the live positions of the selection ``w``."""


@dataclass(frozen=True, eq=False)
class IndexSelect(Operator):
    """``payload[index]`` for a rank-0 natural index."""
