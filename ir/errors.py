"""Typed errors and diagnostics shared by every layer.

Every problem a user's spec can cause is a :class:`SpecError` (or a subclass) that carries the
JSON path of the offending value and the chain of block titles around it. Nothing in ncdc lets a
bare KeyError, IndexError or RecursionError escape from user input.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .frozen import quick_init


class SpecError(Exception):
    """A problem with a spec, located by JSON path and block-title chain."""

    def __init__(self, message: str, json_path: str = "", titles: tuple[str, ...] = (),
                 node_type: str | None = None, field_name: str | None = None):
        self.message = message
        self.json_path = json_path
        self.titles = tuple(titles)
        self.node_type = node_type
        self.field_name = field_name
        super().__init__(self.__str__())

    def __str__(self) -> str:
        parts = [self.message]
        if self.json_path:
            parts.append(f"at {self.json_path}")
        if self.titles:
            parts.append("in " + " / ".join(self.titles))
        return " ".join(parts)


class SpecFormatError(SpecError):
    """The text is not a readable document (broken or truncated JSON, unknown envelope)."""

    def __init__(self, message: str, json_path: str = "", offset: int | None = None,
                 line: int | None = None, column: int | None = None):
        self.offset, self.line, self.column = offset, line, column
        super().__init__(message, json_path)


class SpecDecodeError(SpecError):
    """A value does not decode: unknown ``__type__``, missing or ill-typed field, bad reference."""


class SpecTypeError(SpecError):
    """A morphism is ill-typed: composition mismatch, arity, bad rearrangement, ..."""


class TruncatedError(SpecError):
    """An operation needed a part of the spec that was cut off."""


class BindingError(SpecError):
    """A size or constant symbol has no value, or a value of the wrong kind."""


class UsageError(SpecError):
    """An argument the caller gave is unusable: a path, a flag value, a weights or inputs
    file. The command line reports it in one line and exits 2."""


class EvaluationError(SpecError):
    """A numerical evaluation failed on user data (bad input shape, index out of table, ...)."""


class DistributedError(EvaluationError):
    """A rank of a run on several processes failed: names the rank and its own error in one
    line; ``rank`` and ``rank_traceback`` (the rank's traceback text) are kept for debugging."""

    def __init__(self, message: str, rank: int | None = None, rank_traceback: str = ""):
        self.rank = rank
        self.rank_traceback = rank_traceback
        super().__init__(message)


class DistributedTimeout(DistributedError, TimeoutError):
    """The ranks of a run on several processes did not finish in time (every rank killed)."""


class NonCausalError(SpecError):
    """A block's output at a token reads a later token (:mod:`ir.incremental`): it cannot be
    decoded one token at a time."""


SEVERITIES = ("error", "warning", "info")


@quick_init
@dataclass(frozen=True)
class Diagnostic:
    """One validation finding."""

    severity: str
    code: str
    message: str
    json_path: str = ""
    titles: tuple[str, ...] = ()
    axes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict:
        return {"severity": self.severity, "code": self.code, "message": self.message,
                "json_path": self.json_path, "titles": list(self.titles), "axes": list(self.axes)}

    def __str__(self) -> str:
        where = f" at {self.json_path}" if self.json_path else ""
        chain = f" [{' / '.join(self.titles)}]" if self.titles else ""
        axes = f" (axes: {', '.join(self.axes)})" if self.axes else ""
        return f"{self.severity}: {self.code}: {self.message}{where}{chain}{axes}"
