"""The statements of a generated method body, as data, and the one printer that writes them.

A rule does not write source lines: it appends :class:`Statement` values (through
:class:`codegen.emit.FunctionWriter`). Each statement knows what it binds (``targets``), its
value (``expr``, one Python expression), the names it reads (``reads``, from the parsed
expression), the emulate-mode rounding it carries (``rounding``: printed as
``self.held(<expr>, ...)``, a field, never text), its trailing comment and the heading comments
above it. A body is a flat list; ``depth`` nests a statement under the ``if``/``for`` header
before it. The passes of :mod:`codegen.passes` rewrite that list; :func:`print_body` writes it.
"""
from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass, field

ASSIGN, EXPR, RETURN, IF, FOR = "assign", "expr", "return", "if", "for"


@dataclass(frozen=True)
class Rounding:
    """Emulate-mode rounding to a storage ``encoding`` (MX blocks of ``channels``, code): the
    generated base class's ``self.held``, the identity in exact mode."""

    encoding: str
    channels: str | None = None

    def code(self, expr: str) -> str:
        return f"self.held({expr}, {self.encoding!r}{', ' + self.channels if self.channels else ''})"


@dataclass(frozen=True)
class Statement:
    """One statement: ``targets = expr`` (``ASSIGN``), ``expr`` (``EXPR``), ``return expr``
    (``RETURN``), ``if expr:`` (``IF``) or ``for targets[0] in expr:`` (``FOR``)."""

    kind: str
    expr: str
    targets: tuple[str, ...] = ()
    rounding: Rounding | None = None
    comment: str | None = None
    headings: tuple[str, ...] = ()
    depth: int = 0
    reads: tuple[str, ...] = field(init=False, compare=False)
    """Every name the statement reads, once per occurrence (a subscripted target's too)."""

    def __post_init__(self):
        names = list(names_in(self.expr)) if self.expr else []
        for t in self.targets:
            if not t.isidentifier():
                names.extend(names_in(t))
        object.__setattr__(self, "reads", tuple(names))

    @property
    def bound(self) -> tuple[str, ...]:
        """The names this statement binds."""
        return tuple(t for t in self.targets if t.isidentifier())

    def binds_only(self, name: str) -> bool:
        """``name = ...`` or ``for name in ...``."""
        return self.kind in (ASSIGN, FOR) and self.targets == (name,)

    def occurrences(self, name: str) -> int:
        """How often ``name`` appears in the statement's code (bound or read)."""
        return self.reads.count(name) + self.bound.count(name)

    @property
    def value(self) -> str:
        """The value's code, with its rounding."""
        return self.rounding.code(self.expr) if self.rounding else self.expr

    def rounded(self, rounding: Rounding) -> Statement:
        """This statement with ``rounding`` applied to its value (after any it has)."""
        expr = self.value if self.rounding else self.expr
        return dataclasses.replace(self, expr=expr, rounding=rounding)

    def renamed(self, old: str, new: str) -> Statement:
        """Every read and binding of ``old`` becomes ``new``."""
        if not self.occurrences(old):
            return self
        return dataclasses.replace(
            self, expr=rename(self.expr, old, new),
            targets=tuple(new if t == old else t if t.isidentifier() else rename(t, old, new)
                          for t in self.targets))

    def code(self) -> str:
        """The statement's code (no comment, no indent)."""
        if self.kind == ASSIGN:
            return ", ".join(self.targets) + " = " + self.value
        if self.kind == RETURN:
            return "return " + self.value
        if self.kind == IF:
            return f"if {self.expr}:"
        if self.kind == FOR:
            return f"for {self.targets[0]} in {self.expr}:"
        return self.value


def print_body(body: list[Statement], indent: str, step: str = "    ") -> list[str]:
    """The source lines of a body (unwrapped: :func:`codegen.emit.wrap_line` breaks long ones)."""
    out = []
    for s in body:
        pad = indent + step * s.depth
        out.extend(pad + "# " + h for h in s.headings)
        out.append(pad + s.code() + (f"  # {s.comment}" if s.comment else ""))
    return out


# -- expressions: parsed, never matched as text ---------------------------------------------------
def _names(code: str) -> list[ast.Name]:
    try:
        tree = ast.parse(code, mode="eval")
    except SyntaxError:
        raise AssertionError(f"internal: generated expression does not parse: {code!r}") from None
    return [n for n in ast.walk(tree) if isinstance(n, ast.Name)]


def names_in(code: str) -> tuple[str, ...]:
    """The names an expression reads, once per occurrence."""
    return tuple(n.id for n in _names(code))


def _offsets(code: str) -> list[int]:
    """Byte offset of each line's start (ast positions count UTF-8 bytes)."""
    starts, pos = [0], 0
    for line in code.encode("utf-8").split(b"\n")[:-1]:
        pos += len(line) + 1
        starts.append(pos)
    return starts


def splice(code: str, spans: list[tuple[ast.AST, str]]) -> str:
    """``code`` with each node's source replaced by its text."""
    raw = code.encode("utf-8")
    starts = _offsets(code)
    cuts = sorted(((starts[n.lineno - 1] + n.col_offset, starts[n.end_lineno - 1]
                    + n.end_col_offset, text) for n, text in spans), reverse=True)
    for a, b, text in cuts:
        raw = raw[:a] + text.encode("utf-8") + raw[b:]
    return raw.decode("utf-8")


def rename(code: str, old: str, new: str) -> str:
    """Every read of the name ``old`` in the expression ``code`` becomes ``new``."""
    hits = [(n, new) for n in _names(code) if n.id == old]
    return splice(code, hits) if hits else code


def where_reads(code: str, name: str) -> list[ast.Call]:
    """The calls ``torch.where(<mask name>, name, 0)`` in ``code`` (a re-zeroing of ``name``)."""
    tree = ast.parse(code, mode="eval")
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_where_of(n, name)]


def _is_where_of(n: ast.Call, name: str) -> bool:
    f = n.func
    if not (isinstance(f, ast.Attribute) and f.attr == "where" and isinstance(f.value, ast.Name)
            and f.value.id == "torch" and len(n.args) == 3 and not n.keywords):
        return False
    mask, value, fill = n.args
    return (isinstance(mask, ast.Name) and isinstance(value, ast.Name) and value.id == name
            and isinstance(fill, ast.Constant) and type(fill.value) is int and fill.value == 0)
