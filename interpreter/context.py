"""What a rule may consult besides its inputs: :class:`RuleContext`."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ncdc.ir.errors import EvaluationError
from ncdc.ir.morphisms import Broadcasted


@dataclass
class RuleContext:
    """Everything one evaluation of one ``Broadcasted`` can see (built once per site when the
    plan is compiled; ``params`` set before each run).

    ``batch`` are the logical sizes of the enclosing lifted blocks' dimensions, ``degree`` those
    of this Broadcasted's degree; inputs and outputs lead with ``(*batch, *degree)``."""

    site: Broadcasted
    evaluator: object
    scope: object
    batch: tuple[int, ...]
    degree: tuple[int, ...]
    params: dict = field(default_factory=dict)
    param_keys: dict = field(default_factory=dict)
    _numbers: dict = field(default_factory=dict, repr=False, compare=False)
    """Memo of bound sizes and constants, keyed by the expression's id (the expression is kept
    beside its value, so the id stays its own)."""

    @property
    def env(self):
        return self.evaluator.env

    @property
    def quant(self) -> str:
        return self.evaluator.quant

    @property
    def lead(self) -> tuple[int, ...]:
        return self.batch + self.degree

    @property
    def nlead(self) -> int:
        return len(self.batch) + len(self.degree)

    @property
    def titles(self) -> tuple[str, ...]:
        return self.scope.titles

    @property
    def rng(self) -> np.random.Generator:
        return self.evaluator.rng

    def size(self, expr) -> int:
        """``expr`` bound to an integer (memoised: a context built once serves every run)."""
        key = ("size", id(expr))
        hit = self._numbers.get(key)
        if hit is None:
            hit = self._numbers[key] = (self.env.size(expr), expr)
        return hit[0]

    def number(self, expr):
        """``expr`` bound to a number (memoised)."""
        key = ("number", id(expr))
        hit = self._numbers.get(key)
        if hit is None:
            hit = self._numbers[key] = (self.env.number(expr), expr)
        return hit[0]

    def sizes(self, axes) -> tuple[int, ...]:
        """The bound sizes of ``axes`` (memoised)."""
        key = ("sizes", tuple(axes))
        hit = self._numbers.get(key)
        if hit is None:
            hit = self._numbers[key] = self.env.sizes(axes)
        return hit

    def param(self, role: str) -> np.ndarray:
        try:
            return self.params[role]
        except KeyError:
            raise self.error(f"no {role} array for this occurrence") from None

    def error(self, message: str) -> EvaluationError:
        return EvaluationError(message, self.site.path, self.titles,
                               node_type=type(self.site.operator).__name__)

    def formula(self, op):
        """The lowered (vectorised) function of an ``Arithmetic`` formula, cached."""
        return self.evaluator.formula(op)
