"""The regex subset a checkpoint map may use, checked when the map is loaded.

Python's ``re`` backtracks and has no time bound, and the stdlib has no linear-time matcher, so
a map's regexes are restricted to a subset whose matching cost is bounded by a small polynomial
in the name's length, and the names they are matched against are bounded in length
(:data:`MAX_NAME`):

- no repetition inside a repeated group (``(a+)+``, ``(a*b)*``) and no alternation inside one
  (``(a|ab)+``): the shapes that backtrack exponentially; a group that is only optional
  (``(...)?``, ``{0,1}``) may contain anything;
- at most :data:`MAX_REPEATS` repetitions (``*``, ``+``, ``{m,n}`` with n > 1) per regex, so
  the worst case is ``MAX_NAME ** MAX_REPEATS`` steps;
- repetition counts up to :data:`MAX_COUNT`, a pattern of at most :data:`MAX_PATTERN`
  characters, nested at most :data:`MAX_DEPTH` groups deep.

:func:`check` returns why a pattern is outside the subset, or None.
"""
from __future__ import annotations

import re

MAX_NAME = 256
"""Longest tensor name a map's regexes are matched against."""
MAX_REPEATS = 3
MAX_COUNT = 1000
MAX_PATTERN = 1000
MAX_DEPTH = 20

try:  # Python 3.11+
    import re._constants as _c
    import re._parser as _p
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c
    import sre_parse as _p

_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT} | ({_c.POSSESSIVE_REPEAT}
                                             if hasattr(_c, "POSSESSIVE_REPEAT") else set())


def _children(op, av):
    """The sub-patterns of one parsed item."""
    if op in _REPEATS:
        return [av[2]]
    if op is _c.SUBPATTERN:
        return [av[-1]]
    if op is _c.BRANCH:
        return list(av[1])
    if op in (_c.ASSERT, _c.ASSERT_NOT):
        return [av[1]]
    if op is _c.GROUPREF_EXISTS:
        return [x for x in av[1:] if x is not None]
    if hasattr(_c, "ATOMIC_GROUP") and op is _c.ATOMIC_GROUP:
        return [av]
    return []


def _walk(items, under_repeat: bool, depth: int, count: list) -> str | None:
    if depth > MAX_DEPTH:
        return f"groups nested more than {MAX_DEPTH} deep"
    for op, av in items:
        if op in _REPEATS:
            lo, hi = av[0], av[1]
            if lo > MAX_COUNT or (hi is not _c.MAXREPEAT and hi > MAX_COUNT):
                return f"a repetition count above {MAX_COUNT}"
            many = hi is _c.MAXREPEAT or hi > 1
            if many:
                if under_repeat:
                    return "a repetition inside a repeated group (nested quantifiers)"
                count[0] += 1
                if count[0] > MAX_REPEATS:
                    return f"more than {MAX_REPEATS} repetitions (*, +, {{m,n}})"
            why = _walk(av[2], under_repeat or many, depth + 1, count)
        elif op is _c.BRANCH and under_repeat:
            return "an alternation inside a repeated group"
        else:
            why = None
            for sub in _children(op, av):
                why = why or _walk(sub, under_repeat, depth + 1, count)
        if why:
            return why
    return None


def check(text: str) -> str | None:
    """Why ``text`` is outside the safe subset (see the module docstring), or None."""
    if len(text) > MAX_PATTERN:
        return f"longer than {MAX_PATTERN} characters"
    try:
        parsed = _p.parse(text)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        return f"not a valid regex: {exc}"
    return _walk(list(parsed), False, 0, [0])


__all__ = ["MAX_NAME", "MAX_REPEATS", "check"]
