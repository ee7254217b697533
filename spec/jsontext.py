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
stack (no recursion, so deep inputs never raise ``RecursionError``). A container that begins
near the start of one that failed to decode, or in a root that cannot close, is walked without a
bulk decode first (it most often fails too, and its failing decode would scan the text again up
to the cut), for at most :data:`SPECULATION_MEMBERS` members before it is decoded in bulk after
all (see :data:`SPECULATION_REACH`).
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


def _end(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where ``pattern`` (one that also matches the empty string) stops matching at ``pos``."""
    m = pattern.match(text, pos)
    return m.end() if m else pos
_HEX = frozenset("0123456789abcdefABCDEF")
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
# Characters that may follow a number without being part of it.
_NUMBER_FOLLOWERS = frozenset(" \t\n\r,]}")

def _unique(pairs, dict=dict, len=len):  # (builtins bound once: it runs per object)
    """An object's members as a dict; a key given twice is an error (every envelope rejects
    it: a repeated key is ambiguous, not "last wins")."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("repeated key")
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_unique)
_raw_decode = _DECODER.raw_decode
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]  # public, not in the stubs
_JSONDecodeError = json.JSONDecodeError

_ARTICLE = {"object": "an object", "array": "an array", "string": "a string",
            "number": "a number", "literal": "a literal"}


def _line_col(text: str, offset: int) -> tuple[int, int]:
    last = text.rfind("\n", 0, offset)  # (a search from the end: a one-line text costs no count)
    line = text.count("\n", 0, last) + 2 if last >= 0 else 1
    return line, offset - last


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
    p = _end(_STR_BODY, text, start + 1)
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
        p = _end(_DIGITS, text, p + 1)
    else:
        return p
    if p < n and text[p] == ".":
        q = _end(_DIGITS, text, p + 1)
        if q == p + 1:
            return q
        p = q
    if p < n and text[p] in "eE":
        p += 1
        if p < n and text[p] in "+-":
            p += 1
        q = _end(_DIGITS, text, p)
        if q == p:
            return q
        p = q
    return p


def _literal_cut(text: str, start: int) -> int:
    """Length of the longest prefix of a literal that the text at ``start`` matches."""
    best = 0
    for lit in _LITERALS:
        k = 0
        for a, b in zip(text[start:start + len(lit)], lit, strict=False):
            if a != b:
                break
            k += 1
        best = max(best, k)
    return best


# --------------------------------------------------------------------------------------------
# the walker


class _Frame:
    __slots__ = ("container", "key", "key_end", "key_start", "kind", "path", "reach",
                 "speculative", "start")

    def __init__(self, kind: str, container, path: str, start: int, reach: int,
                 speculative: bool) -> None:
        self.kind = kind
        self.container = container
        self.path = path
        self.start = start
        # How many levels below it containers may be walked on speculation: SPECULATION_DEPTH
        # when its text has a problem (its bulk decode raised ValueError, or a root that cannot
        # close), one less than its parent's when walked on speculation, else 0.
        self.reach = reach
        self.speculative = speculative  # walked without a bulk decode tried
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

#: A container that begins within ``SPECULATION_REACH`` characters of the start of a container
#: that does not decode in one piece (``{"__type__": "Composed", "content": [...`` of a cut
#: file), or anywhere in a root that cannot close, most often spans the cut too and does not
#: decode either: the walker walks into it without trying, down to ``SPECULATION_DEPTH``
#: levels below the failed container, each for at most ``SPECULATION_MEMBERS`` members; past
#: them it decodes that container in one piece after all.
SPECULATION_REACH = 256
SPECULATION_DEPTH = 2
SPECULATION_MEMBERS = 32
_NOTHING = object()


def _walk(text: str) -> _Outcome:
    """Parse ``text`` up to its first problem; see the module docstring for the conventions."""
    return _Walker(text).run()


_STOP = object()  # a step met the problem: the cut is described on the walker


class _Walker:
    """The explicit-stack walk behind :func:`_walk`.  Each step reads at ``pos`` in ``state``
    and returns ``None`` (state advanced, go on), ``_STOP`` (the cut is set) or ``(value, end)``
    (a complete value for the current slot)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.n = len(text)
        # Bulk decodes read ``window`` = ``text[base:]`` (see ``decode``).
        self.window = text
        self.base = 0
        self.stack: list[_Frame] = []
        self.root: object = _NOTHING
        self.pos = _end(_WS, text, 0)
        # A root container can decode in one piece only if the text ends with a closer (a
        # truncated text never does): else its bulk decode would scan all of it, only to fail.
        last = len(text) - 1
        while last >= 0 and text[last] in " \t\n\r":
            last -= 1
        self.open_end = last < 0 or text[last] not in "]}"
        self.state = _EXPECT_VALUE
        self.tried: set[int] = set()  # starts of containers walked on speculation, given up
        # Describe the cut: set by the steps, then assembled after the loop.
        self.cut = self.n
        self.reason = ""
        self.truncated = True  # the problem looks like the text just ends
        self.leaf: Incomplete | None = None
        self.dangling: str | None = None  # raw text of a cut/dangling key of the innermost object
        self.key_cut = False  # the cut is inside that key's string

    def decode(self, pos: int):
        """``(value, end)`` of the JSON value at ``pos``, decoded in bulk (raises as
        ``raw_decode``). A failing decode counts the lines of its text up to the problem, so the
        decodes read a suffix of the text: moved up to ``pos`` when copying the rest costs less
        than the lines from the suffix's start (the copies add up to less than the text), or
        back to ``pos`` when a speculation given up reads a container again."""
        base = self.base
        if pos < base or pos - base > self.n - pos:  # (behind it: a speculation given up)
            self.window, self.base = self.text[pos:], pos
            base = pos
        value, end = _raw_decode(self.window, pos - base)
        return value, end + base

    def stop(self, cut: int, reason: str, truncated: bool = True) -> object:
        self.cut, self.reason, self.truncated = cut, reason, truncated
        return _STOP

    def here(self) -> str:
        """The JSON path of a value beginning at ``pos``."""
        return self.stack[-1].child_path() if self.stack else ""

    def run(self) -> _Outcome:
        while True:
            if self.state == _AFTER_VALUE:
                got = self.after_value()
            elif self.state == _EXPECT_KEY or self.state == _FIRST_KEY:
                got = self.key()
            else:
                got = self.value()
            if got is None:
                continue
            if got is _STOP:
                break
            value, end = got
            if not self.stack:
                self.root = value
                self.pos = _end(_WS, self.text, end)
                if self.pos < self.n:
                    self.stop(self.pos, "extra data after the document", False)
                    break
                return _Outcome(value, True)
            top = self.stack[-1]
            if top.kind == "array":
                top.container.append(value)
            else:
                top.container[top.key] = value
                top.key = None
            if top.speculative and len(top.container) > SPECULATION_MEMBERS:
                self.give_up(top)
                continue
            self.pos = _end(_WS, self.text, end)
            self.state = _AFTER_VALUE
        return self.assemble()

    def give_up(self, frame: _Frame) -> None:
        """Stop walking ``frame`` (entered on speculation, the innermost frame): read it again
        as a value, in one piece."""
        self.stack.pop()
        self.tried.add(frame.start)
        self.pos, self.state = frame.start, _EXPECT_VALUE

    # ---- the states

    def after_value(self):
        top, pos, text = self.stack[-1], self.pos, self.text
        if pos >= self.n:
            return self.stop(self.n, f"text ends inside {_ARTICLE[top.kind]}")
        c = text[pos]
        if c == ",":
            self.pos = _end(_WS, text, pos + 1)
            self.state = _EXPECT_VALUE if top.kind == "array" else _EXPECT_KEY
            return None
        closer = "]" if top.kind == "array" else "}"
        if c == closer:
            self.stack.pop()
            return top.container, pos + 1
        return self.stop(pos, f"unexpected character {c!r} (expected ',' or {closer!r})", False)

    def key(self):
        top, pos, text, n = self.stack[-1], self.pos, self.text, self.n
        if pos >= n:
            return self.stop(n, "text ends inside an object")
        c = text[pos]
        if c == "}" and self.state == _FIRST_KEY:
            self.stack.pop()
            return top.container, pos + 1
        if c != '"':
            expected = "a key string or '}'" if self.state == _FIRST_KEY else "a key string"
            return self.stop(pos, f"unexpected character {c!r} (expected {expected})", False)
        body = _end(_STR_BODY, text, pos + 1)
        if body >= n or text[body] != '"':  # (json's own error would count the text's lines)
            self.cut, self.reason, self.truncated = _string_cut(text, pos)
            self.dangling, self.key_cut = text[pos:self.cut], True
            return _STOP
        key, end = _scanstring(text, pos + 1, True)
        if key in top.container:
            return self.stop(pos, f"repeated key {key!r} in an object", False)
        top.key, top.key_start, top.key_end = key, pos, end
        q = _end(_WS, text, end)
        if q >= n:
            return self.stop(n, "text ends inside an object")
        if text[q] != ":":
            return self.stop(q, f"unexpected character {text[q]!r} (expected ':')", False)
        self.pos = _end(_WS, text, q + 1)
        self.state = _EXPECT_VALUE
        return None

    def value(self):  # _EXPECT_VALUE or _FIRST_ITEM
        pos, text = self.pos, self.text
        if pos >= self.n:
            if self.stack:
                return self.stop(self.n, f"text ends inside {_ARTICLE[self.stack[-1].kind]}")
            return self.stop(self.n, "text ends before any value")
        c = text[pos]
        if c == "]" and self.state == _FIRST_ITEM:
            top = self.stack.pop()
            return top.container, pos + 1
        if c == "{" or c == "[":
            return self.container(c)
        if c == '"':
            return self.string()
        if c in "tfnNI" or (c == "-" and text.startswith("I", pos + 1)):
            return self.literal(c)
        if c == "-" or "0" <= c <= "9":
            return self.number()
        return self.stop(pos, f"unexpected character {c!r}", False)

    # ---- the values

    def container(self, c: str):
        pos, stack = self.pos, self.stack
        failed = not stack and self.open_end  # a root that cannot close
        top = stack[-1] if stack else None
        speculate = top is not None and top.reach > 0 and pos not in self.tried and (
            pos - top.start <= SPECULATION_REACH or (len(stack) == 1 and self.open_end))
        if not (failed or speculate):
            try:
                return self.decode(pos)
            except ValueError:  # a problem in its text (RecursionError: only too deep)
                failed = True
            except RecursionError:
                pass
        reach = (SPECULATION_DEPTH if failed else top.reach - 1 if speculate and top is not None
                 else 0)
        # Not decodable in one piece (or, on speculation, likely not): walk into it.
        if len(stack) >= MAX_DEPTH:
            return self.stop(pos, "nesting too deep", False)
        path = self.here()
        if c == "{":
            stack.append(_Frame("object", {}, path, pos, reach, speculate))
            self.state = _FIRST_KEY
        else:
            stack.append(_Frame("array", [], path, pos, reach, speculate))
            self.state = _FIRST_ITEM
        self.pos = _end(_WS, self.text, pos + 1)
        return None

    def string(self):
        pos, text = self.pos, self.text
        try:
            return self.decode(pos)
        except _JSONDecodeError:
            self.cut, self.reason, self.truncated = _string_cut(text, pos)
            self.leaf = Incomplete("string", None, self.here(), pos, text[pos:self.cut])
            return _STOP

    def literal(self, c: str):
        pos, text = self.pos, self.text
        try:
            return self.decode(pos)
        except _JSONDecodeError:
            pass
        k = _literal_cut(text, pos)
        if k == 0:
            return self.stop(pos, f"unexpected character {c!r}", False)
        cut = pos + k
        if cut >= self.n:
            self.stop(cut, "text ends inside a literal")
        else:
            self.stop(cut, f"unexpected character {text[cut]!r} in a literal", False)
        self.leaf = Incomplete("literal", None, self.here(), pos, text[pos:cut])
        return _STOP

    def number(self):
        pos, text, n = self.pos, self.text, self.n
        try:
            value, end = self.decode(pos)
        except _JSONDecodeError:
            value, end = None, -1
        except ValueError as exc:  # e.g. more digits than int() accepts
            return self.stop(pos, f"number cannot be converted ({exc})", False)
        if (0 <= end < n and text[end] in _NUMBER_FOLLOWERS) or (end == n and not self.stack):
            return value, end
        cut = _number_cut(text, pos)
        if cut >= n:
            self.stop(cut, "text ends inside a number")
        else:
            self.stop(cut, f"unexpected character {text[cut]!r} in a number", False)
        self.leaf = Incomplete("number", None, self.here(), pos, text[pos:cut])
        return _STOP

    # ---- the cut

    def assemble(self) -> _Outcome:
        stack, leaf = self.stack, self.leaf
        if stack and stack[-1].kind == "object" and leaf is None and self.dangling is None:
            top = stack[-1]
            if top.key is not None:
                self.dangling = self.text[top.key_start:top.key_end]
        child = leaf
        for frame in reversed(stack):
            inc = Incomplete(frame.kind, frame.container, frame.path, frame.start)
            if child is not None:
                if frame.kind == "array":
                    frame.container.append(child)
                else:
                    frame.container[frame.key] = child
            elif frame.kind == "object":
                inc.dangling_key = self.dangling
            child = inc
        if self.root is not _NOTHING and not stack and leaf is None:
            value, complete, headline = self.root, True, "has extra data"
        else:
            value, complete = child, False  # None when no value had begun
            headline = self.headline()
        cut_path = leaf.json_path if leaf is not None else (stack[-1].path if stack else "")
        return _Outcome(value, complete, self.cut, self.reason, headline, cut_path,
                        [f.path for f in stack])

    def headline(self) -> str:
        if not self.truncated:
            return "is invalid"
        if self.leaf is not None:
            return f"ends inside {_ARTICLE[self.leaf.kind]}"
        if self.key_cut:
            return "ends inside a string"
        if self.stack:
            return f"ends inside {_ARTICLE[self.stack[-1].kind]}"
        return "ends before any value"


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
