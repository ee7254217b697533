"""Naming blocks: the labels the tool prints and every form ``--block`` accepts.

A block's **label** is the chain of block titles from the root to it, each title followed by
``~k`` when it is the k-th repeat among its siblings (the segments of parameter keys), joined by
`` / ``: ``Sliding Window Layer / Single-Pass mHC~1 / Cast``; a block the truncation cut counts
as ``(truncated block)``. Labels are unique per block site.

:func:`find` accepts, in this order:

1. a JSON path (``data.content[2]``);
2. a whole label or parameter-key path (``Sliding Window Layer / Single-Pass mHC~1``,
   ``Sliding Window Layer/Single-Pass mHC~1``); iteration marks ``@i`` of key paths are
   ignored;
3. a title, plain or LaTeX, case-insensitive (``Mixing Coefficients``, ``\\text{Mixing
   Coefficients}``); several different blocks with the title are ambiguous, several
   occurrences of one term are not (the first is taken);
4. a trailing part of a label or key path (``Single-Pass mHC~1``, ``mHC~1 / Cast~1``).

Anything else is a :class:`BlockLookupError` whose ``candidates`` are the (label, path) pairs of
an ambiguous name or the close matches (difflib) of a typo.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from ncdc.ir.errors import SpecError
from ncdc.ir.morphisms import Block, Morphism, Truncated
from ncdc.ir.names import plain_title
from ncdc.ir.params import block_segments, titled_children
from ncdc.ir.walk import Site, walk

CUT_BLOCK = "(truncated block)"
"""The label segment of a block the truncation cut (its title is lost), as ``ir.walk`` names it."""


class BlockLookupError(SpecError):
    """A block name that names no block, or several different ones. ``candidates`` holds the
    (label, JSON path) pairs the user may have meant."""

    def __init__(self, message: str, candidates: list[tuple[str, str]]):
        self.candidates = list(candidates)
        super().__init__(message)

    def __str__(self) -> str:
        if not self.candidates:
            return self.message
        return self.message + "\n" + candidate_table(self.candidates)


@dataclass(frozen=True)
class NamedBlock:
    """One block site with its key-path segments."""

    site: Site
    segments: tuple[str, ...]

    @property
    def label(self) -> str:
        return " / ".join(self.segments)

    @property
    def key_path(self) -> str:
        return "/".join(self.segments)

    @property
    def path(self) -> str:
        return self.site.path


def _children_segments(block: Block) -> dict[int, str]:
    body = block.body
    return block_segments([body] if isinstance(body, Block) else titled_children(body))


def named_blocks(root: Morphism) -> list[NamedBlock]:
    """Every block site below ``root`` (itself included), pre-order, with its label."""
    segs0 = {} if isinstance(root, Block) else block_segments(titled_children(root))
    out = []
    stack = [(root, root.path, (), segs0, 0, ())]
    while stack:
        node, path, chain, segs, depth, titles = stack.pop()
        if isinstance(node, Block):
            chain = chain + (segs.get(id(node), node.title),)
            titles = titles + (node.title,)
            out.append(NamedBlock(Site(node, path, titles, depth), chain))
            segs = _children_segments(node)
        elif isinstance(node, Truncated) and node.expected == "Block":
            chain, titles = chain + (CUT_BLOCK,), titles + (CUT_BLOCK,)
            segs = {}
        for step, child in reversed(node.children()):
            stack.append((child, path + step, chain, segs, depth + 1, titles))
    return out


def labels(root: Morphism) -> dict[str, str]:
    """JSON path -> label of every block site below ``root``."""
    return {b.path: b.label for b in named_blocks(root)}


_ESCAPED = re.compile(r"\\([&%$#_])")


def _norm(text: str) -> str:
    """Comparison form of a name: plain text, LaTeX escapes (``\\&``) dropped, spaces
    collapsed, case folded."""
    return " ".join(_ESCAPED.sub(r"\1", plain_title(text)).split()).casefold()


_SLASH = re.compile(r"\s*/\s*")
_ITERATION = re.compile(r"@\d+(?=/|$)")


def _canon(path: str) -> str:
    """Comparison form of a label or key path: separators without spaces, ``@i`` dropped.
    (Compared as whole strings, so a title that holds a slash, ``x / 448``, still matches.)"""
    return _ITERATION.sub("", _SLASH.sub("/", _norm(path)))


def find(root: Morphism, query: str) -> Site:
    """The block (or, by JSON path, any morphism) that ``query`` names; see the module doc."""
    q = query.strip()
    sites = {s.path: s for s in walk(root)}
    if q in sites:
        return sites[q]
    if q.startswith((root.path + ".", root.path + "[")):
        return _enclosing(root, sites, q)
    named = named_blocks(root)
    want = _canon(q)
    canon = [_canon(b.label) for b in named]
    hits = [b for b, c in zip(named, canon, strict=True) if c == want]
    if not hits:
        nq = _norm(q)
        hits = [b for b in named if b.site.node.tag.title == q or _norm(b.site.node.title) == nq]
    if not hits and want:
        hits = [b for b, c in zip(named, canon, strict=True) if c.endswith("/" + want.lstrip("/"))]
    if hits:
        if len({b.site.node.tag.uid for b in hits}) > 1:
            raise BlockLookupError(f"{q!r} names {len(hits)} different blocks; give one of "
                                   "these labels or JSON paths:",
                                   [(b.label, b.path) for b in hits])
        return hits[0].site
    raise BlockLookupError(f"no block is named {q!r}" + (
        "; did you mean one of these?" if (near := suggestions(named, q)) else ""), near)


_LAST_STEP = re.compile(r"(?:\.[A-Za-z_]\w*|\[\d+\])$")


def _enclosing(root: Morphism, sites: dict[str, Site], path: str) -> Site:
    """A JSON path that is not a morphism's (a field, as validation reports them): an error
    naming the nearest enclosing morphism."""
    probe = path
    while probe and probe not in sites:
        cut = _LAST_STEP.sub("", probe)
        if cut == probe:
            break
        probe = cut
    near = sites.get(probe)
    if near is None:
        raise BlockLookupError(f"no morphism is at path {path!r}", [])
    label = labels(root).get(near.path) or " / ".join(near.titles) or type(near.node).__name__
    raise BlockLookupError(f"no morphism is at path {path!r}; the nearest enclosing one is:",
                           [(label, near.path)])


def suggestions(named: list[NamedBlock], query: str, n: int = 8) -> list[tuple[str, str]]:
    """Close matches of a mistyped name, best first: titles, last label segments and labels
    within difflib's ratio 0.6 of the query, then (for a query of 4 characters or more) the
    titles containing it; case-insensitive, the first site of each name."""
    first: dict[str, NamedBlock] = {}
    for b in named:
        for name in (b.site.node.title, b.segments[-1], b.label):
            first.setdefault(_norm(name), b)
    nq = _norm(query)
    close = difflib.get_close_matches(nq, list(first), n=n, cutoff=0.6)
    if len(nq) >= 4:
        close += sorted(k for k in first if nq in k and " / " not in k and k not in close)
    out, seen = [], set()
    for key in close:
        b = first[key]
        if b.path not in seen:
            seen.add(b.path)
            out.append((b.label, b.path))
    return out[:n]


def candidate_table(rows: list[tuple[str, str]], limit: int = 40) -> str:
    """Candidates as a two-column table (label, JSON path), one per line."""
    shown = rows[:limit]
    width = max([len(label) for label, _ in shown] + [5])
    lines = [f"  {'BLOCK':<{width}}  JSON PATH"]
    lines += [f"  {label:<{width}}  {path}" for label, path in shown]
    if len(rows) > limit:
        lines.append(f"  ... and {len(rows) - limit} more")
    return "\n".join(lines)
