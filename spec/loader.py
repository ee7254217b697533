"""Reading a spec file: text -> JSON (strict or salvaged) -> plain document -> IR."""
from __future__ import annotations

import gc
import os
import re
from dataclasses import dataclass, field

from ncdc.ir.axes import Axis
from ncdc.ir.errors import SpecDecodeError, SpecError, SpecFormatError
from ncdc.ir.morphisms import Morphism, Truncated
from ncdc.ir.numeric import FreeNumeric
from ncdc.ir.tags import BlockTag, TapeSlot

from . import (  # noqa: F401
    terms_morphisms,
    terms_numeric,
    terms_operators,
    terms_scan,
    terms_tensorlogic,
    terms_types,
)
from .auxiliary import Auxiliary, broadcast_paths, read_auxiliary
from .builder import Builder, ConsequenceError
from .envelope import Opened, open_document
from .jsontext import Incomplete, JsonTextError, parse_salvage, parse_strict


@dataclass
class Document:
    """What the loader produces: the model term, the repository's named records, and what (if
    anything) was lost to truncation."""

    data: Morphism
    source: str
    envelope: str
    axes: dict[int, Axis] = field(default_factory=dict)
    symbols: dict[int, FreeNumeric] = field(default_factory=dict)
    tags: dict[int, BlockTag] = field(default_factory=dict)
    tape_slots: dict[int, TapeSlot] = field(default_factory=dict)
    truncated: list[Truncated] = field(default_factory=list)
    salvage: object | None = None  # spec.jsontext.SalvageReport when salvaged and incomplete
    text_length: int = 0
    auxiliary: Auxiliary = field(default_factory=Auxiliary)
    address: str | None = None  # the FILE#part that chose this diagram (spec.envelope)
    broadcasts: list[str] = field(default_factory=list)  # spec.auxiliary.broadcast_paths
    no_surrogates: bool = False
    """The text holds only ASCII characters and no ``\\uD`` escape, so no string decoded from
    it can hold a lone surrogate (:mod:`spec.checks_names` need not search its names)."""


MAX_SPEC_BYTES = 256 * 2**20
"""Default cap on a spec file's size (``max_bytes``; ``--max-spec-bytes`` on the command
line). The bundled spec is about 20 MiB."""


def read_text(source: str | os.PathLike, max_bytes: int | None = None) -> str:
    """The file's text, read in bounded chunks: a file (or endless stream) past ``max_bytes``
    is refused after reading at most that much, and a NUL byte (never in UTF-8 JSON text:
    ``/dev/zero``, UTF-16, binary files) as soon as its chunk is read."""
    limit = MAX_SPEC_BYTES if max_bytes is None else max_bytes
    if limit < 0:
        raise SpecFormatError(f"the size cap must be at least 0 bytes, not {limit}")
    try:
        with open(source, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise SpecFormatError(_too_big(source, f"is {size} bytes", limit))
            chunks, total = [], 0
            while True:
                chunk = fh.read(min(1 << 20, limit + 1 - total))
                if not chunk:
                    break
                nul = chunk.find(b"\0")
                if nul >= 0:
                    raise SpecFormatError(f"{os.fspath(source)!r} is not UTF-8 JSON text: a "
                                          f"NUL byte at offset {total + nul}",
                                          offset=total + nul)
                chunks.append(chunk)
                total += len(chunk)
                if total > limit:
                    raise SpecFormatError(_too_big(source, "continues", limit))
            raw = b"".join(chunks)
    except OSError as exc:
        raise SpecFormatError(f"cannot read {os.fspath(source)!r}: "
                              f"{exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecFormatError(f"{os.fspath(source)!r} is not UTF-8 text (byte {exc.start})",
                              offset=exc.start) from None


def load_text(text: str, source: str = "<text>", salvage: bool = False,
              part: str | None = None) -> Document:
    """Decode a spec from its text. Strict unless ``salvage``: then every complete term is
    kept and cut ones become :class:`~ir.Truncated` nodes. ``part`` chooses a diagram of a
    bundle or a root of a list ``data`` (``FILE#part``, :mod:`spec.envelope`).

    The cyclic garbage collector is paused while decoding: the parse and the IR are ~10^5
    acyclic objects, and full collections triggered by their allocation are pure overhead."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return _load_text(text, source, salvage, part)
    finally:
        if paused:
            gc.enable()


def _parse(text: str, source: str, salvage: bool):
    """``(value, report)``: the JSON value (with :class:`Incomplete` markers when salvaging a
    broken text) and the salvage report, ``None`` unless salvaging a broken text."""
    if salvage:
        value, report = parse_salvage(text)
        return value, (None if report.complete else report)
    try:
        return parse_strict(text), None
    except JsonTextError as exc:
        # The path is not in the message: SpecError.__str__ appends "at <path>" once.
        where = "" if exc.json_path else " (in the root value)"
        raise SpecFormatError(
            f"{source}: JSON text is broken: {exc.reason} at offset {exc.offset} (line "
            f"{exc.line}, column {exc.column}); the file looks truncated or corrupted "
            f"(--salvage recovers every complete term); innermost open value{where}",
            exc.json_path, exc.offset, exc.line, exc.column) from None


def _plain(value, source: str, part: str | None) -> Opened:
    """The diagram ``part`` names inside ``value`` (:func:`spec.envelope.open_document`)."""
    if not isinstance(value, Incomplete):
        try:
            return open_document(value, part)
        except SpecFormatError as exc:
            exc.message = f"{source}: {exc.message}"
            exc.args = (str(exc),)
            raise
    if value.kind != "object" or not isinstance(value.partial, dict):
        raise SpecFormatError(f"{source}: too little of the document survived to salvage")
    doc = value.partial
    for key in ("uid_repository", "data"):
        if key not in doc:
            raise SpecFormatError(f"{source}: the salvaged document has no {key!r}", key)
    if part is not None:
        raise SpecFormatError(f"{source}: a salvaged document is one diagram: nothing in it "
                              f"is named {part!r}")
    return Opened(doc, doc["data"], "data", "plain (salvaged)")


def _load_text(text: str, source: str, salvage: bool, part: str | None) -> Document:
    value, report = _parse(text, source, salvage)
    opened = _plain(value, source, part)
    doc, envelope = opened.doc, opened.envelope
    repo = doc["uid_repository"]
    if isinstance(repo, Incomplete):
        repo = repo.partial or {}
    b = Builder(repo, salvage=salvage)
    # data is set once decoded, below
    out = Document(data=None, source=source, envelope=envelope,  # type: ignore[arg-type]
                   salvage=report,
                   text_length=len(text), address=opened.address,
                   no_surrogates=_surrogate_free(text))
    if opened.auxiliary is not None:
        out.auxiliary = read_auxiliary(opened.auxiliary)
        out.broadcasts = broadcast_paths(doc)
    problems: list[SpecError] = []
    for key in repo:
        if not key.lstrip("-").isdigit():
            problems.append(SpecDecodeError(f"repository key {key!r} is not an integer id",
                                            f"uid_repository.{key}"))
            continue
        try:
            rec = b.ref({"__ref__": int(key)}, f"uid_repository.{key}")
        except ConsequenceError:
            continue
        except SpecDecodeError as exc:
            problems.append(exc)
            continue
        except RecursionError:
            problems.append(_too_deep(f"uid_repository.{key}"))
            continue
        _index(out, int(key), rec)
    try:
        data = b.term(opened.data, opened.data_path)
    except SpecDecodeError as exc:
        problems.append(exc)
        data = None
    except RecursionError:
        problems.append(_too_deep("data"))
        data = None
    problems.extend(b.problems)
    if problems:
        first = problems[0]
        if len(problems) > 1:
            first.message += f" (and {len(problems) - 1} more problem(s))"
            first.args = (str(first),)
        first.problems = problems  # type: ignore[attr-defined]  # all of them, for the report
        raise first
    if not isinstance(data, Morphism):
        raise SpecDecodeError("data must be a morphism", opened.data_path)
    out.data = data
    out.truncated = list(b.truncated)
    return out


def load_path(path: str | os.PathLike, salvage: bool = False,
              max_bytes: int | None = None, part: str | None = None) -> Document:
    """The spec file at ``path``; ``part`` as for :func:`load_text`, its source then
    ``path#part``."""
    source = os.fspath(path) if part is None else f"{os.fspath(path)}#{part}"
    return load_text(read_text(path, max_bytes), source, salvage, part)


def _surrogate_free(text: str) -> bool:
    """Whether no JSON string of ``text`` can decode to a lone surrogate: only ASCII (no raw
    surrogate) and no ``\\ud``/``\\uD`` escape (a surrogate is spelled ``\\uD800`` to
    ``\\uDFFF``). A false "no" (``\\ud`` after an escaped backslash) only costs the full
    search."""
    return text.isascii() and _SURROGATE_ESCAPE.search(text) is None


_SURROGATE_ESCAPE = re.compile(r"\\u[dD]")


def _too_big(source, what: str, limit: int) -> str:
    return (f"{os.fspath(source)!r} {what} past the cap of {limit} bytes on a spec file "
            "(raise it with --max-spec-bytes N)")


def _too_deep(path: str) -> SpecDecodeError:
    return SpecDecodeError("terms nested too deeply to decode (Python's recursion limit)", path)


def _index(doc: Document, uid: int, rec) -> None:
    if isinstance(rec, Axis):
        doc.axes[uid] = rec
    elif isinstance(rec, FreeNumeric):
        doc.symbols[uid] = rec
    elif isinstance(rec, BlockTag):
        doc.tags[uid] = rec
    elif isinstance(rec, TapeSlot):
        doc.tape_slots[uid] = rec


def load_expansion(doc: Document, key: int) -> Document:
    """The diagram expansion ``key`` of ``doc``'s auxiliary writes out (:mod:`spec.auxiliary`):
    its document decoded strictly, its source ``SOURCE (expansion KEY: OPERATOR)``, its own
    auxiliary (nested expansions included) read."""
    exp = doc.auxiliary.expansions.get(key)
    if exp is None:
        have = ", ".join(str(k) for k in doc.auxiliary.expansions) or "none"
        raise SpecFormatError(f"{doc.source} has no expansion {key}; its expansions: {have}")
    source = f"{doc.source} (expansion {key}: {exp.operator})"
    sub = load_text(exp.text, source)
    if exp.auxiliary:
        sub.auxiliary = read_auxiliary(exp.auxiliary, f"auxiliary.expansions.{key}.auxiliary")
        sub.broadcasts = broadcast_paths(open_document(parse_strict(exp.text)).doc)
    return sub
