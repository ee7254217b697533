"""What an operator's ``check`` sees: one ``Broadcasted`` applying it, and where to report.

:meth:`Operator.check <ir.operators.base.Operator.check>` states an operator's arity, rank and
datatype rules (docs/format.md §11) with the vocabulary of :class:`Site`; ``spec.checks_broadcast``
builds the site and calls it. The sink is any object with the :class:`Diagnostics` methods
(``spec.validate.Checker``), so ``ir`` states the rules without depending on ``spec``.

Codes: ``operator-arity`` (number of operands/results), ``operator-rank`` (target ranks),
``operator-type`` (datatype kinds), plus the codes an operator's own rule names
(``einops-group``, ``box-port``, ...).
"""
from __future__ import annotations

from typing import Any, Protocol

from ..arrays import Array
from ..datatypes import kind
from ..shapes import axis_labels


class Diagnostics(Protocol):
    """Where diagnostics go: ``error``/``warning`` record one; ``typed`` is the checked
    ``dom``/``cod`` of a morphism (None when it does not type); ``env`` binds sizes or is None."""

    env: Any

    def error(self, code: str, message: str, path: str = "", titles=(), axes=()) -> None: ...

    def warning(self, code: str, message: str, path: str = "", titles=(), axes=()) -> None: ...

    def typed(self, node: Any, attr: str) -> Any: ...


class Site:
    """A ``Broadcasted`` ``b`` at JSON path ``path`` inside blocks ``titles``; every helper
    reports through ``ck`` and returns whether the rule held."""

    def __init__(self, ck: Diagnostics, b, path: str, titles=()):
        self.ck, self.b, self.path, self.titles = ck, b, path, titles

    @property
    def op(self):
        return self.b.operator

    @property
    def name(self) -> str:
        return type(self.b.operator).__name__

    @property
    def env(self):
        return self.ck.env

    def typed(self, node, attr: str):
        return self.ck.typed(node, attr)

    def error(self, code: str, message: str, field: str = "", axes=()) -> None:
        """An error at ``path`` + ``field`` (``".operator.signature"``, ``".input_weaves[0]"``)."""
        self.ck.error(code, message, self.path + field, self.titles, axes)

    def warning(self, code: str, message: str, field: str = "", axes=()) -> None:
        self.ck.warning(code, message, self.path + field, self.titles, axes)

    def arity(self, n_in: int | None = None, n_out: int | None = None,
              min_in: int | None = None, max_in: int | None = None) -> bool:
        """Exactly ``n_in`` (or ``min_in``..``max_in``) operands and ``n_out`` results."""
        n, m = len(self.b.input_weaves), len(self.b.output_weaves)
        low = n_in if n_in is not None else min_in
        high = n_in if n_in is not None else max_in
        if (low is not None and n < low) or (high is not None and n > high):
            if n_in is not None:
                want = str(n_in)
            elif high is None:
                want = f"at least {low}"
            else:
                want = f"{low} to {high}" if low is not None else f"at most {high}"
            self.error("operator-arity", f"{self.name} takes {want} operand(s), this one has {n}",
                       ".input_weaves")
            return False
        if n_out is not None and m != n_out:
            self.error("operator-arity", f"{self.name} gives {n_out} result(s), this one has {m}",
                       ".output_weaves")
            return False
        return True

    def rank(self, side: str, k: int, want: int, what: str) -> bool:
        """Weave ``k`` of ``side`` (``"input"``/``"output"``) has ``want`` target axes."""
        w = (self.b.input_weaves if side == "input" else self.b.output_weaves)[k]
        got = len(w.target)
        if got != want:
            self.error("operator-rank", f"{self.name}: {side} {k} should have {what} ({want} "
                       f"target axis/axes), the weave {w} has {got}", f".{side}_weaves[{k}]",
                       tuple(a.label for a in w.target))
            return False
        return True

    def all_tiled(self) -> bool:
        """Every weave has only TILED slots (an elementwise operator)."""
        b = self.b
        for side, weaves in (("input", b.input_weaves), ("output", b.output_weaves)):
            for k in range(len(weaves)):
                if not self.rank(side, k, 0, "only TILED slots"):
                    return False
        return True

    def same_target(self) -> bool:
        """Output 0 has input 0's target axes (a normalisation keeps them)."""
        b = self.b
        a, c = b.input_weaves[0].target, b.output_weaves[0].target
        if tuple(x.uid for x in a) == tuple(x.uid for x in c):
            return True
        self.error("operator-rank", f"{self.name} keeps its target axes, but maps "
                   f"[{', '.join(x.label for x in a)}] to [{', '.join(x.label for x in c)}]",
                   ".output_weaves[0]", axis_labels(
                       (Array(b.input_weaves[0].datatype, a),
                        Array(b.output_weaves[0].datatype, c))))
        return False

    def kind_is(self, k: int, want: str) -> bool:
        """Input ``k``'s datatype is of kind ``want`` (``real``, ``natural``, ``complex``)."""
        w = self.b.input_weaves[k]
        if kind(w.datatype) == want:
            return True
        self.error("operator-type", f"{self.name}: input {k} must be {want}, the weave says "
                   f"{w.datatype}", f".input_weaves[{k}]")
        return False


__all__ = ["Diagnostics", "Site"]
