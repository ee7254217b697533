"""Strict and salvaging loaders for JSON text, with precise error locations.

``parse_strict(text)`` behaves like ``json.loads`` but, when the text is broken, raises a
:class:`JsonTextError` that says *where* (offset, line, column), *inside what* (the JSON path of
the innermost value that had begun when the problem was met) and *why*.

``parse_salvage(text)`` recovers every complete value of a broken (typically truncated) text and
marks what was cut with :class:`Incomplete` markers, returning a :class:`SalvageReport` with it.

Definitions used throughout
---------------------------
* **Cut offset**: the length of the longest prefix of ``text`` that can still be continued into a
  valid JSON document (plus, after a complete document, its trailing whitespace).  It is
  ``len(text)`` when the text just ends early, otherwise the offset of the first character that
  cannot belong to any JSON document continuing the prefix (a raw control character inside a
  string, a bad escape, an unexpected character, extra data after the document).  A raw control
  character inside a string (e.g. a newline) is reported as the text *ending inside a string*:
  it is what a cut followed by unrelated bytes looks like.  ``text[cut_offset:]`` is the trailing
  garbage.
* **JSON path**: object keys joined with ``.``, list indices as ``[i]``; the root is ``""``.  The
  path reported for a problem is that of the innermost value whose text had begun at the cut
  offset.  Object keys are not values: a problem inside a key, or between a key and its value,
  reports the path of the object.
* **Incomplete leaf**: a string, number or literal token that touches the cut offset.  A number
  that touches the cut is always incomplete (``12`` might have been ``123``), even when it is a
  valid number by itself; a closed string or a whole ``true``/``false``/``null`` is complete.
  The one exception is a bare number that is the whole document and ends exactly at the end of
  the text: that is valid JSON and is returned as complete.
* **Dangling key**: an object key that was cut, or that was complete but whose value had not
  begun.  It is *dropped* from the object's ``partial`` (there is no value to map it to) and its
  raw text (e.g. ``'"__r'``) is kept in :attr:`Incomplete.dangling_key` of that object.

``NaN``, ``Infinity`` and ``-Infinity`` are accepted as literals, exactly as ``json.loads`` does.
Nesting deeper than :data:`MAX_DEPTH` open containers is a problem ("nesting too deep"):
``parse_strict`` raises, ``parse_salvage`` treats the too-deep container as the cut point.

Performance: complete subtrees are decoded in bulk with ``json.JSONDecoder.raw_decode`` (C
speed); only the containers that enclose the cut are walked member by member, with an explicit
stack (no recursion, so deep inputs never raise ``RecursionError``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

__all__ = [
    "MAX_DEPTH",
    "Incomplete",
    "JsonTextError",
    "SalvageReport",
    "parse_salvage",
    "parse_strict",
]

#: Most containers the walker opens itself, one inside the other.  Complete subtrees are decoded
#: in bulk by ``json`` (which handles nesting up to about Python's recursion limit), so a valid
#: document somewhat deeper than this may still load; anything deeper is "nesting too deep".
MAX_DEPTH = 2000

_WS = re.compile(r"[ \t\n\r]*")
_DIGITS = re.compile(r"[0-9]*")
# The body of a JSON string: everything legal up to the closing quote (or the first problem).
_STR_BODY = re.compile(r'(?:[^"\\\x00-\x1f]+|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
_HEX = frozenset("0123456789abcdefABCDEF")
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
# Characters that may follow a number without being part of it.
_NUMBER_FOLLOWERS = frozenset(" \t\n\r,]}")

def _unique(pairs):
    """An object's members as a dict; a key given twice is an error (every envelope rejects
    it: a repeated key is ambiguous, not "last wins")."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("repeated key")
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_unique)
_raw_decode = _DECODER.raw_decode
_scanstring = json.decoder.scanstring
_JSONDecodeError = json.JSONDecodeError

_ARTICLE = {"object": "an object", "array": "an array", "string": "a string",
            "number": "a number", "literal": "a literal"}


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    column = offset - text.rfind("\n", 0, offset)
    return line, column


class JsonTextError(Exception):
    """A JSON text could not be parsed.

    Attributes: ``offset`` (0-based character offset of the problem), ``line`` and ``column``
    (1-based), ``json_path`` (path of the innermost value whose text had begun, ``""`` for the
    root), ``reason`` (short text) and ``headline`` (e.g. ``"ends inside a string"``).
    """

    def __init__(self, offset: int, line: int, column: int, json_path: str, reason: str,
                 headline: str = "is invalid") -> None:
        self.offset = offset
        self.line = line
        self.column = column
        self.json_path = json_path
        self.reason = reason
        self.headline = headline
        super().__init__(str(self))

    def __str__(self) -> str:
        return (f"JSON text {self.headline} at offset {self.offset} (line {self.line}, column "
                f"{self.column}), in {self.json_path or '<root>'}: {self.reason}")

    def __reduce__(self):
        return (type(self), (self.offset, self.line, self.column, self.json_path, self.reason,
                             self.headline))


@dataclass(repr=False)
class Incomplete:
    """Marker for a value whose text was cut.

    ``kind`` is ``'object'``, ``'array'``, ``'string'``, ``'number'`` or ``'literal'``.
    ``partial``: for an object, a dict of the complete key/value pairs recovered (plus, as last
    entry, the key whose value was cut mapped to that value's ``Incomplete``); for an array, the
    list of complete items recovered (plus, last, the ``Incomplete`` item that was cut, if it had
    begun); ``None`` for leaves.  ``json_path`` and ``offset`` locate the start of the value.
    ``raw`` is the text of a cut leaf token (e.g. ``'"abc'`` or ``'1.5e'``); ``dangling_key`` the
    raw text of an object's key that was dropped because its value had not begun.
    """

    kind: str
    partial: dict | list | None = None
    json_path: str = ""
    offset: int = 0
    raw: str | None = None
    dangling_key: str | None = None

    def __repr__(self) -> str:
        where = f"kind={self.kind!r}, json_path={self.json_path!r}, offset={self.offset}"
        if self.partial is None:
            return f"Incomplete({where}, raw={self.raw!r})"
        values = self.partial.values() if isinstance(self.partial, dict) else self.partial
        cut = sum(isinstance(v, Incomplete) for v in values)
        noun = "members" if isinstance(self.partial, dict) else "items"
        extra = f", dangling_key={self.dangling_key!r}" if self.dangling_key is not None else ""
        return (f"Incomplete({where}, partial=<{len(self.partial) - cut} complete + {cut} "
                f"incomplete {noun}>{extra})")


@dataclass
class SalvageReport:
    """What :func:`parse_salvage` found.

    ``complete``: the returned value contains no :class:`Incomplete` (a complete document, possibly
    followed by garbage: see :attr:`valid`).  ``cut_offset``/``cut_line``/``cut_column``: where the
    usable text ends (``None`` when the whole text is valid).  ``cut_path``: path of the innermost
    value whose text had begun at the cut.  ``trailing_garbage``: ``text[cut_offset:]`` when it is
    not empty, else ``None``.  ``open_paths``: paths of all ``Incomplete`` containers, outermost
    first.  ``reason``: short text of the problem (``None`` when valid).
    """

    complete: bool
    cut_offset: int | None = None
    cut_line: int | None = None
    cut_column: int | None = None
    cut_path: str | None = None
    trailing_garbage: str | None = None
    open_paths: list[str] = field(default_factory=list)
    reason: str | None = None

    @property
    def valid(self) -> bool:
        """True when the whole text was one valid JSON document."""
        return self.complete and self.cut_offset is None


# --------------------------------------------------------------------------------------------
# token analysis (only used for the token at the cut)


def _string_cut(text: str, start: int) -> tuple[int, str, bool]:
    """For a string opening at ``start`` that does not decode: (cut offset, reason, truncated)."""
    n = len(text)
    p = _STR_BODY.match(text, start + 1).end()
    if p >= n:
        return n, "text ends inside a string", True
    c = text[p]
    if c == "\\":
        if p + 1 >= n:
            return n, "text ends inside a string escape", True
        if text[p + 1] == "u":
            q = p + 2
            while q < n and q < p + 6 and text[q] in _HEX:
                q += 1
            if q >= n:
                return n, "text ends inside a string escape", True
            return q, f"invalid \\u escape: unexpected character {text[q]!r}", False
        return p + 1, f"invalid escape character {text[p + 1]!r} in a string", False
    if c == '"':  # pragma: no cover - the regex accepts what json's scanstring accepts
        return p, "unexpected string decoding failure", False
    return p, f"invalid control character {c!r} inside a string", True


def _number_cut(text: str, start: int) -> int:
    """End of the longest prefix of a number token at ``start`` that could still be continued."""
    n = len(text)
    p = start
    if text[p] == "-":
        p += 1
    if p < n and text[p] == "0":
        p += 1
    elif p < n and "1" <= text[p] <= "9":
        p = _DIGITS.match(text, p + 1).end()
    else:
        return p
    if p < n and text[p] == ".":
        q = _DIGITS.match(text, p + 1).end()
        if q == p + 1:
            return q
        p = q
    if p < n and text[p] in "eE":
        p += 1
        if p < n and text[p] in "+-":
            p += 1
        q = _DIGITS.match(text, p).end()
        if q == p:
            return q
        p = q
    return p


def _literal_cut(text: str, start: int) -> int:
    """Length of the longest prefix of a literal that the text at ``start`` matches."""
    best = 0
    for lit in _LITERALS:
        k = 0
        for a, b in zip(text[start:start + len(lit)], lit):
            if a != b:
                break
            k += 1
        best = max(best, k)
    return best


# --------------------------------------------------------------------------------------------
# the walker


class _Frame:
    __slots__ = ("container", "key", "key_end", "key_start", "kind", "path", "start")

    def __init__(self, kind: str, container, path: str, start: int) -> None:
        self.kind = kind
        self.container = container
        self.path = path
        self.start = start
        self.key = None
        self.key_start = 0
        self.key_end = 0

    def child_path(self) -> str:
        if self.kind == "array":
            return f"{self.path}[{len(self.container)}]"
        return f"{self.path}.{self.key}" if self.path else str(self.key)


@dataclass
class _Outcome:
    value: object
    complete: bool
    cut: int | None = None
    reason: str | None = None
    headline: str | None = None
    cut_path: str = ""
    open_paths: list[str] = field(default_factory=list)


_EXPECT_VALUE, _FIRST_ITEM, _EXPECT_KEY, _FIRST_KEY, _AFTER_VALUE = range(5)
_NOTHING = object()


def _walk(text: str) -> _Outcome:
    """Parse ``text`` up to its first problem; see the module docstring for the conventions."""
    n = len(text)
    stack: list[_Frame] = []
    root = _NOTHING
    pos = _WS.match(text, 0).end()
    state = _EXPECT_VALUE

    # Describe the cut: set by the code below, then assembled after the loop.
    cut = n
    reason = ""
    truncated = True  # the problem looks like the text just ends
    leaf: Incomplete | None = None
    dangling: str | None = None  # raw text of a cut/dangling key of the innermost object
    key_cut = False  # the cut is inside that key's string

    while True:
        if state == _AFTER_VALUE:
            top = stack[-1]
            if pos >= n:
                cut, reason = n, f"text ends inside {_ARTICLE[top.kind]}"
                break
            c = text[pos]
            if c == ",":
                pos = _WS.match(text, pos + 1).end()
                state = _EXPECT_VALUE if top.kind == "array" else _EXPECT_KEY
                continue
            if c == ("]" if top.kind == "array" else "}"):
                stack.pop()
                value, end = top.container, pos + 1
            else:
                closer = "]" if top.kind == "array" else "}"
                cut, reason, truncated = (
                    pos, f"unexpected character {c!r} (expected ',' or {closer!r})", False)
                break

        elif state == _EXPECT_KEY or state == _FIRST_KEY:
            top = stack[-1]
            if pos >= n:
                cut, reason = n, "text ends inside an object"
                break
            c = text[pos]
            if c == "}" and state == _FIRST_KEY:
                stack.pop()
                value, end = top.container, pos + 1
            elif c == '"':
                try:
                    key, end = _scanstring(text, pos + 1, True)
                except _JSONDecodeError:
                    cut, reason, truncated = _string_cut(text, pos)
                    dangling, key_cut = text[pos:cut], True
                    break
                if key in top.container:
                    cut, reason, truncated = pos, f"repeated key {key!r} in an object", False
                    break
                top.key, top.key_start, top.key_end = key, pos, end
                q = _WS.match(text, end).end()
                if q >= n:
                    cut, reason = n, "text ends inside an object"
                    break
                if text[q] != ":":
                    cut, reason, truncated = (
                        q, f"unexpected character {text[q]!r} (expected ':')", False)
                    break
                pos = _WS.match(text, q + 1).end()
                state = _EXPECT_VALUE
                continue
            else:
                expected = "a key string or '}'" if state == _FIRST_KEY else "a key string"
                cut, reason, truncated = (
                    pos, f"unexpected character {c!r} (expected {expected})", False)
                break

        else:  # _EXPECT_VALUE or _FIRST_ITEM
            if pos >= n:
                if stack:
                    cut, reason = n, f"text ends inside {_ARTICLE[stack[-1].kind]}"
                else:
                    cut, reason = n, "text ends before any value"
                break
            c = text[pos]
            if c == "]" and state == _FIRST_ITEM:
                top = stack.pop()
                value, end = top.container, pos + 1
            elif c == "{" or c == "[":
                try:
                    value, end = _raw_decode(text, pos)
                except (ValueError, RecursionError):
                    # Not decodable in one piece: walk into it.
                    if len(stack) >= MAX_DEPTH:
                        cut, reason, truncated = pos, "nesting too deep", False
                        break
                    path = stack[-1].child_path() if stack else ""
                    if c == "{":
                        stack.append(_Frame("object", {}, path, pos))
                        state = _FIRST_KEY
                    else:
                        stack.append(_Frame("array", [], path, pos))
                        state = _FIRST_ITEM
                    pos = _WS.match(text, pos + 1).end()
                    continue
            elif c == '"':
                try:
                    value, end = _raw_decode(text, pos)
                except _JSONDecodeError:
                    cut, reason, truncated = _string_cut(text, pos)
                    leaf = Incomplete("string", None, stack[-1].child_path() if stack else "",
                                      pos, text[pos:cut])
                    break
            elif c in "tfnNI" or (c == "-" and text.startswith("I", pos + 1)):
                try:
                    value, end = _raw_decode(text, pos)
                except _JSONDecodeError:
                    k = _literal_cut(text, pos)
                    if k == 0:
                        cut, reason, truncated = pos, f"unexpected character {c!r}", False
                    else:
                        cut = pos + k
                        if cut >= n:
                            reason = "text ends inside a literal"
                        else:
                            reason = f"unexpected character {text[cut]!r} in a literal"
                            truncated = False
                        leaf = Incomplete("literal", None,
                                          stack[-1].child_path() if stack else "",
                                          pos, text[pos:cut])
                    break
            elif c == "-" or "0" <= c <= "9":
                try:
                    value, end = _raw_decode(text, pos)
                except _JSONDecodeError:
                    end = -1
                except ValueError as exc:  # e.g. more digits than int() accepts
                    cut, reason, truncated = pos, f"number cannot be converted ({exc})", False
                    break
                if not ((end < n and end >= 0 and text[end] in _NUMBER_FOLLOWERS)
                        or (end == n and not stack)):
                    cut = _number_cut(text, pos)
                    if cut >= n:
                        reason = "text ends inside a number"
                    else:
                        reason = f"unexpected character {text[cut]!r} in a number"
                        truncated = False
                    leaf = Incomplete("number", None, stack[-1].child_path() if stack else "",
                                      pos, text[pos:cut])
                    break
            else:
                cut, reason, truncated = pos, f"unexpected character {c!r}", False
                break

        # A complete value (``value``, ending at ``end``) for the current slot.
        if not stack:
            root = value
            pos = _WS.match(text, end).end()
            if pos < n:
                cut, reason, truncated = pos, "extra data after the document", False
                break
            return _Outcome(root, True)
        top = stack[-1]
        if top.kind == "array":
            top.container.append(value)
        else:
            top.container[top.key] = value
            top.key = None
        pos = _WS.match(text, end).end()
        state = _AFTER_VALUE

    # ---- assemble the cut
    if stack and stack[-1].kind == "object" and leaf is None and dangling is None:
        top = stack[-1]
        if top.key is not None:
            dangling = text[top.key_start:top.key_end]
    child = leaf
    for frame in reversed(stack):
        inc = Incomplete(frame.kind, frame.container, frame.path, frame.start)
        if child is not None:
            if frame.kind == "array":
                frame.container.append(child)
            else:
                frame.container[frame.key] = child
        elif frame.kind == "object":
            inc.dangling_key = dangling
        child = inc

    if root is not _NOTHING and not stack and leaf is None:
        headline = "has extra data"
        value, complete = root, True
    else:
        value = child  # None when no value had begun
        complete = False
        if not truncated:
            headline = "is invalid"
        elif leaf is not None:
            headline = f"ends inside {_ARTICLE[leaf.kind]}"
        elif key_cut:
            headline = "ends inside a string"
        elif stack:
            headline = f"ends inside {_ARTICLE[stack[-1].kind]}"
        else:
            headline = "ends before any value"
    if leaf is not None:
        cut_path = leaf.json_path
    else:
        cut_path = stack[-1].path if stack else ""
    return _Outcome(value, complete, cut, reason, headline, cut_path, [f.path for f in stack])


# --------------------------------------------------------------------------------------------
# public API


def parse_strict(text: str) -> object:
    """Parse a JSON text like ``json.loads``; raise :class:`JsonTextError` if it is broken."""
    try:
        return _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        first = exc
    out = _walk(text)
    if out.cut is not None:
        line, col = _line_col(text, out.cut)
        raise JsonTextError(out.cut, line, col, out.cut_path, out.reason or "", out.headline or "")
    if isinstance(first, _JSONDecodeError):  # pragma: no cover - walker and json always agree
        line, col = _line_col(text, first.pos)
        raise JsonTextError(first.pos, line, col, "", first.msg)
    return out.value  # valid, but too deep for json's C scanner


def parse_salvage(text: str) -> tuple[object, SalvageReport]:
    """Parse as much of ``text`` as possible.

    Returns ``(value, report)``.  Complete values are plain JSON values; every container open at
    the cut is an :class:`Incomplete` holding its complete members (see the module docstring).
    When no value had begun at all (empty text, or garbage from the first character) the value
    is ``None`` and ``report.complete`` is False.
    """
    out = _walk(text)
    if out.cut is None:
        return out.value, SalvageReport(complete=True)
    line, col = _line_col(text, out.cut)
    garbage = text[out.cut:] or None
    return out.value, SalvageReport(
        complete=out.complete, cut_offset=out.cut, cut_line=line, cut_column=col,
        cut_path=out.cut_path, trailing_garbage=garbage, open_paths=out.open_paths,
        reason=out.reason)
