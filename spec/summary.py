"""What a (salvaged) spec contains: complete blocks, cut blocks, and tags without a body.

* :func:`block_titles` — the inventory of block titles: occurrences in ``data`` (both categories)
  and the tag records of the repository with that title, referenced by a block or not. A title
  none of whose tags is referenced by a block of ``data`` is *repository-only* (docs/format.md §15: the
  repository is written in full, so it names the blocks of the truncated remainder too).
* :func:`bodiless_tags` — the repository's tags that label no block of ``data``, grouped by
  block title, each group with the blocks of ``data`` that do carry that title and the cut
  blocks inferred to be it. pyncd writes a tag into the repository once its block is written,
  body first (``data_transfer/term_json.py``, ``to_json``), so the repository lists tags in the
  order their blocks end in the model; a tag written after the last one ``data`` uses belongs
  to the part of the model past the cut.
* :func:`salvage_summary` — for a salvaged document: the blocks recovered complete, the blocks
  that were cut (with an *inference* of what they were, see :func:`infer_cut_block`), the
  repository-only titles, and a one-line description for notices.

Inference rule for a cut block that lost its tag: the spec repeats structure (layer after layer),
so look for a complete block at the *analogous* path — the cut block's path with one enclosing
list index replaced by an earlier one (innermost list first, nearest earlier index first). The
title of that block is the guess. The tag is then: the analogue's own tag when it is the only tag
with that title (a shared block, e.g. "Mixing Coefficients"), else the single unreferenced tag
with that title if there is exactly one, else unknown. This reproduces docs/format.md §1.4; it is an
inference and always reported as one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ncdc.ir.morphisms import Block, Morphism, Truncated
from ncdc.ir.tags import BlockDrawing

from .checks_sites import all_sites

_INDEX = re.compile(r"\.content\[(\d+)\]")


@dataclass(frozen=True)
class TitleEntry:
    """One block title: where it has a body in ``data`` and how many tags carry it."""

    title: str
    latex: str
    paths: tuple[str, ...]
    tags_referenced: int
    tags_unreferenced: int

    @property
    def has_body(self) -> bool:
        return bool(self.paths)

    def as_dict(self) -> dict:
        return {"title": self.title, "latex": self.latex, "occurrences": len(self.paths),
                "paths": list(self.paths), "has_body": self.has_body,
                "tags_referenced": self.tags_referenced,
                "tags_unreferenced": self.tags_unreferenced}


@dataclass(frozen=True)
class CutBlock:
    """A block the truncation cut. ``inferred_*`` are a guess (see module docstring)."""

    path: str
    titles: tuple[str, ...]
    tag_lost: bool
    kept_fields: tuple[str, ...]
    title: str | None = None
    inferred_title: str | None = None
    inferred_tag: int | None = None
    analogue_path: str | None = None
    candidates: int = 0

    def describe(self) -> str:
        if not self.tag_lost:
            return f"block {self.title!r} at {self.path} (body cut)"
        if self.inferred_title is None:
            return f"block at {self.path} (tag lost; no complete analogue to infer it from)"
        if self.inferred_tag is not None:
            tag = f"tag #{self.inferred_tag}"
        elif self.candidates:
            tag = f"one of {self.candidates} unused tags with that title"
        else:
            tag = "tag unknown"
        return (f"block at {self.path} (tag lost; inferred: {self.inferred_title!r}, {tag}, by "
                f"analogy with {self.analogue_path})")

    def as_dict(self) -> dict:
        return {"path": self.path, "titles": list(self.titles), "tag_lost": self.tag_lost,
                "kept_fields": list(self.kept_fields), "title": self.title,
                "inferred_title": self.inferred_title, "inferred_tag": self.inferred_tag,
                "analogue_path": self.analogue_path, "inferred": self.tag_lost}


@dataclass(frozen=True)
class BodilessTags:
    """The tags of one block title that label no block of ``data`` (uids in repository
    order); ``past_cut`` of them are written after the last tag ``data`` uses. ``bodies``:
    the blocks of ``data`` with that title; ``cut``: the cut blocks inferred to be it."""

    title: str
    latex: str
    uids: tuple[int, ...]
    past_cut: int
    bodies: tuple[str, ...]
    cut: tuple[str, ...]

    def describe(self, most: int = 3) -> str:
        """``Lightning Indexer: 20 tags (#1, #2, #3, +17 more), 20 past the cut; no block of
        that title has a body``."""
        n = len(self.uids)
        ids = ", ".join(f"#{u}" for u in self.uids[:most])
        if n > most:
            ids += f", +{n - most} more"
        text = f"{self.title}: {n} tag{'s' if n > 1 else ''} ({ids})"
        if self.past_cut:
            text += f", {self.past_cut} past the cut"
        if self.bodies:
            text += (f"; {len(self.bodies)} block(s) of that title have a body, the first at "
                     f"{self.bodies[0]}")
        else:
            text += "; no block of that title has a body"
        if self.cut:
            text += f"; cut, inferred to be one: {', '.join(self.cut)}"
        return text

    def as_dict(self) -> dict:
        return {"title": self.title, "latex": self.latex, "tags": list(self.uids),
                "past_cut": self.past_cut, "bodies": list(self.bodies), "cut": list(self.cut)}


@dataclass
class SalvageSummary:
    """What a salvaged document recovered and lost."""

    complete: list[tuple[str, str]] = field(default_factory=list)  # (title, path)
    cut: list[CutBlock] = field(default_factory=list)
    repository_only: list[TitleEntry] = field(default_factory=list)
    bodiless: list[BodilessTags] = field(default_factory=list)
    truncated_terms: int = 0
    stages: list[str] = field(default_factory=list)
    cut_offset: int | None = None
    cut_line: int | None = None
    cut_column: int | None = None
    cut_path: str | None = None
    trailing_garbage: str | None = None

    @property
    def salvaged(self) -> bool:
        return self.cut_offset is not None or bool(self.cut) or self.truncated_terms > 0

    def one_line(self) -> str:
        """``salvaged 117 complete blocks: A → B → C; cut inside D #2 (tag lost, inferred)``."""
        text = f"salvaged {len(self.complete)} complete blocks"
        if self.stages:
            text += ": " + " → ".join(self.stages)
        outer = self.cut[0] if self.cut else None
        if outer is not None:
            name = outer.title or outer.inferred_title
            if name is None:
                text += f"; cut inside the block at {outer.path}"
            else:
                again = sum(1 for s in self.stages for part in s.split(", ") if part == name)
                label = f"{name} #{again + 1}" if again else name
                how = " (tag lost, inferred)" if outer.tag_lost else ""
                text += f"; cut inside {label}{how}"
        elif self.truncated_terms:
            text += f"; {self.truncated_terms} term(s) cut"
        return text

    def as_dict(self) -> dict:
        return {
            "cut_offset": self.cut_offset, "cut_line": self.cut_line,
            "cut_column": self.cut_column, "cut_path": self.cut_path,
            "trailing_garbage": self.trailing_garbage,
            "complete_blocks": [{"title": t, "path": p} for t, p in self.complete],
            "cut_blocks": [c.as_dict() for c in self.cut],
            "repository_only_titles": [e.title for e in self.repository_only],
            "bodiless_tags": [g.as_dict() for g in self.bodiless],
            "truncated_terms": self.truncated_terms,
            "stages": list(self.stages),
            "summary": self.one_line(),
        }


# --------------------------------------------------------------------------- inventory


def _block_sites(root: Morphism):
    return [s for s in all_sites(root) if isinstance(s.node, Block)]


def block_titles(doc, root: Morphism | None = None) -> list[TitleEntry]:
    """Every block title of ``doc``: first those with a body in ``data`` (in order of first
    occurrence), then the repository-only ones (sorted by plain title)."""
    root = doc.data if root is None else root
    order: dict[str, list[str]] = {}
    latex: dict[str, str] = {}
    referenced: set[int] = set()
    for s in _block_sites(root):
        blk = s.node
        order.setdefault(blk.title, []).append(s.path)
        latex.setdefault(blk.title, blk.tag.title)
        referenced.add(blk.tag.uid)
    tag_counts: dict[str, list[int]] = {}
    for tag in getattr(doc, "tags", {}).values():
        counts = tag_counts.setdefault(tag.plain_title, [0, 0])
        counts[0 if tag.uid in referenced else 1] += 1
        latex.setdefault(tag.plain_title, tag.title)
    out = [TitleEntry(t, latex[t], tuple(paths), *tag_counts.get(t, [0, 0]))
           for t, paths in order.items()]
    rest = sorted(t for t in tag_counts if t not in order)
    out.extend(TitleEntry(t, latex[t], (), *tag_counts[t]) for t in rest)
    return out


def repository_only_titles(doc) -> list[TitleEntry]:
    """Titles of repository tags none of which labels a block of ``data``."""
    return [e for e in block_titles(doc) if not e.has_body]


# --------------------------------------------------------------------------- cut blocks


def _analogues(path: str):
    """Candidate analogous paths: one ``.content[i]`` replaced by an earlier index, innermost
    first, nearest index first."""
    matches = list(_INDEX.finditer(path))
    for m in reversed(matches):
        i = int(m.group(1))
        for j in range(i - 1, -1, -1):
            yield path[:m.start()] + f".content[{j}]" + path[m.end():]


def infer_cut_block(node: Truncated, path: str, titles: tuple[str, ...], by_path: dict,
                    tags_by_title: dict, referenced: set[int]) -> CutBlock:
    """Describe a truncated block, inferring its title and tag when the tag was lost.
    ``by_path``: the complete terms by JSON path; ``tags_by_title``: the repository's tags by
    plain title; ``referenced``: uids of the tags that label a block of ``data``."""
    kept = tuple(k for k in node.partial)
    tag = node.partial.get("block_tag")
    if tag is not None and hasattr(tag, "plain_title"):
        return CutBlock(path, titles, False, kept, title=tag.plain_title)
    for cand in _analogues(path):
        hit = by_path.get(cand)
        if isinstance(hit, Block):
            title = hit.title
            same = tags_by_title.get(title, [])
            unused = [t for t in same if t.uid not in referenced]
            if len(same) == 1:
                tag_id, n = same[0].uid, 1
            elif len(unused) == 1:
                tag_id, n = unused[0].uid, 1
            else:
                tag_id, n = None, len(unused)
            return CutBlock(path, titles, True, kept, inferred_title=title,
                            inferred_tag=tag_id, analogue_path=cand, candidates=n)
    return CutBlock(path, titles, True, kept)


def cut_blocks(doc, root: Morphism | None = None, sites=None) -> list[CutBlock]:
    """Every truncated block below ``root`` (outermost first), with inferences. ``sites``:
    ``all_sites(root)`` when the caller already has it."""
    root = doc.data if root is None else root
    sites = list(all_sites(root)) if sites is None else sites
    cut = [s for s in sites if isinstance(s.node, Truncated) and s.node.expected == "Block"]
    if not cut:
        return []
    by_path = {s.path: s.node for s in sites}
    data_sites = sites if root is doc.data else all_sites(doc.data)
    referenced = {s.node.tag.uid for s in data_sites if isinstance(s.node, Block)}
    tags_by_title: dict[str, list] = {}
    for tag in getattr(doc, "tags", {}).values():
        tags_by_title.setdefault(tag.plain_title, []).append(tag)
    return [infer_cut_block(s.node, s.path, s.titles[:-1], by_path, tags_by_title, referenced)
            for s in cut]


def bodiless_tags(doc, sites=None, cut: list[CutBlock] | None = None) -> list[BodilessTags]:
    """The repository's tags no block of ``data`` carries, grouped by plain title, the groups
    in the repository order of their first tag. ``sites``: ``all_sites(doc.data)``; ``cut``:
    :func:`cut_blocks` of the document, when the caller has them."""
    sites = list(all_sites(doc.data)) if sites is None else sites
    cut = cut_blocks(doc, sites=sites) if cut is None else cut
    used: set[int] = set()
    bodies: dict[str, list[str]] = {}
    for s in sites:
        if isinstance(s.node, Block):
            used.add(s.node.tag.uid)
            bodies.setdefault(s.node.title, []).append(s.path)
    inferred: dict[str, list[str]] = {}
    for c in cut:
        name = c.title or c.inferred_title
        if name is not None:
            inferred.setdefault(name, []).append(c.path)
    tags = list(getattr(doc, "tags", {}).values())
    was_cut = bool(getattr(doc, "truncated", None)) or getattr(doc, "salvage", None) is not None
    last_used = max((i for i, t in enumerate(tags) if t.uid in used), default=-1) \
        if was_cut else len(tags)
    groups: dict[str, list] = {}
    for i, tag in enumerate(tags):
        if tag.uid not in used:
            groups.setdefault(tag.plain_title, []).append((i, tag))
    return [BodilessTags(title, members[0][1].title, tuple(t.uid for _, t in members),
                         sum(1 for i, _ in members if i > last_used),
                         tuple(bodies.get(title, ())), tuple(inferred.get(title, ())))
            for title, members in groups.items()]


def _top_items(root: Morphism) -> list[tuple[str, Morphism]]:
    """The sequential stages of the model: the items of the top-level composition."""
    node, path = root, root.path or "data"  # type: ignore[attr-defined]  # on each subclass
    if isinstance(node, Block):
        node, path = node.body, path + ".body"
    if isinstance(node, Truncated) and node.expected == "Composed":
        content = node.partial.get("content", ())
        return [(f"{path}.content[{i}]", m) for i, m in enumerate(content)
                if isinstance(m, Morphism)]
    content = getattr(node, "content", None)
    if isinstance(content, tuple) and type(node).__name__ == "Composed":
        return [(f"{path}.content[{i}]", m) for i, m in enumerate(content)]
    return [(path, node)]


def _stage_name(item: Morphism, path: str) -> str | None:
    """The outermost blocks of one stage (structural ones if any), joined by commas."""
    outer = []
    for s in all_sites(item, path):
        if s.category == "br" and isinstance(s.node, Block) and len(s.titles) == 1:
            outer.append(s.node)
    if not outer:
        return None
    structural = [b for b in outer if b.tag.drawing is not BlockDrawing.BODY_IN_PLACE]
    return ", ".join(b.title for b in (structural or outer))


def _contains_truncated(node: Morphism, path: str) -> bool:
    return any(isinstance(s.node, Truncated) for s in all_sites(node, path))


def salvage_summary(doc) -> SalvageSummary:
    """The salvage report of a document (empty lists for a complete one)."""
    root = doc.data
    truncated_paths = [s.path for s in all_sites(root) if isinstance(s.node, Truncated)]

    def intact(p: str) -> bool:
        return not any(t == p or t.startswith((p + ".", p + "["))
                       for t in truncated_paths)

    out = SalvageSummary()
    out.complete = [(s.node.title, s.path) for s in all_sites(root)
                    if s.category == "br" and isinstance(s.node, Block) and intact(s.path)]
    out.cut = cut_blocks(doc)
    out.repository_only = repository_only_titles(doc)
    out.bodiless = bodiless_tags(doc, cut=out.cut)
    out.truncated_terms = len(truncated_paths)
    for path, item in _top_items(root):
        if isinstance(item, Truncated) or _contains_truncated(item, path):
            break
        name = _stage_name(item, path)
        if name:
            out.stages.append(name)
    rep = getattr(doc, "salvage", None)
    if rep is not None:
        out.cut_offset, out.cut_line, out.cut_column = rep.cut_offset, rep.cut_line, \
            rep.cut_column
        out.cut_path, out.trailing_garbage = rep.cut_path, rep.trailing_garbage
    return out


__all__ = ["BodilessTags", "CutBlock", "SalvageSummary", "TitleEntry", "bodiless_tags",
           "block_titles", "cut_blocks",
           "infer_cut_block", "repository_only_titles", "salvage_summary"]
