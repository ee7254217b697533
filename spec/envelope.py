"""The document envelopes pyncd and tsncd write, opened down to one diagram.

* plain: ``{"uid_repository": {...}, "data": <morphism>}`` (pyncd calls it the
  ``uid_references`` export form; ``"export_form": "uid_references"`` may be written);
* compressed: ``{"export_form": "compressed", "version": 1, "value_repository": [...],
  "data": <root index>}``, records ``[kind, payload]`` referring only to earlier records;
* viewer envelope: ``{"data": "<the document as a JSON string>", "settings": {...},
  "auxiliary": {...}}``, with ``"msgType": "dataUpdate"`` when it is a viewer message and
  without it as tsncd's fixtures store it; ``auxiliary`` is read by :mod:`spec.auxiliary`;
* bundle: an object of named documents (tsncd's ``compressed_term.json``), each member
  addressed as ``FILE#name``.

A document's ``data`` is one morphism, or a list of terms: pyncd writes a Python tuple as a
JSON list and reads it back as a tuple (``data_transfer/term_json.py``, ``to_json`` and
``reconstruct``), so a list is several roots, not a product (a product is a
``ProductOfMorphisms`` term). Each root is addressed by its index, ``FILE#1`` (or
``FILE#name/1`` inside a bundle), and keeps its JSON path ``data[1]``.

Every shape that is none of these is a :class:`~ir.errors.SpecFormatError` naming the keys
found; so is an address that names nothing, listing the names there are.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ncdc.ir.errors import SpecFormatError

from .jsontext import JsonTextError, parse_strict

SCALAR, ARRAY, OBJECT = 0, 1, 2
VIEWER_KEYS = frozenset({"msgType", "data", "settings", "auxiliary"})
PLAIN_FORMS = (None, "plain", "uid_references")
MAX_DEPTH = 8


@dataclass(frozen=True)
class Opened:
    """One diagram out of its envelopes: the plain document, the root term chosen from its
    ``data`` and that root's JSON path, the envelope chain (``viewer/plain``,
    ``bundle/compressed``), the innermost viewer's ``auxiliary`` object (``None`` without
    one) and the address that chose it (``legacy/0``; ``None`` when none was needed)."""

    doc: dict
    data: object
    data_path: str
    envelope: str
    auxiliary: dict | None = None
    address: str | None = None


def split_address(path: str, exists) -> tuple[str, str | None]:
    """``(file, part)`` of ``FILE#part``. A path that names an existing file (``exists(path)``)
    is a file even when it holds ``#``; otherwise the part is after the last ``#``."""
    if "#" not in path or exists(path):
        return path, None
    file, _, part = path.rpartition("#")
    return file, part


def open_document(value: object, part: str | None = None) -> Opened:
    """The diagram ``part`` names inside ``value`` (``None``: the only one there is)."""
    steps = [s for s in part.split("/")] if part else []
    if part is not None and not all(steps):
        raise SpecFormatError(f"address {part!r} has an empty name")
    return _open(value, steps, [], [], None)


def _named(trail: list[str]) -> str:
    return "#" + "/".join(trail) if trail else "the file"


def _open(value, steps: list[str], trail: list[str], kinds: list[str], aux) -> Opened:
    where = _named(trail)
    if len(kinds) > MAX_DEPTH:
        raise SpecFormatError(f"envelopes nested too deeply in {where}")
    if not isinstance(value, dict):
        raise SpecFormatError(f"a spec document is a JSON object, not {type(value).__name__} "
                              f"({where})")
    form = value.get("export_form")
    if "data" in value and "uid_repository" not in value and isinstance(
            value["data"], (dict, list)) and "msgType" not in value and _is_term(value["data"]):
        raise SpecFormatError(f"not a pyncd diagram spec: {where} has data but no "
                              "uid_repository")
    if "msgType" in value or ("data" in value and "uid_repository" not in value
                              and form is None and set(value) <= VIEWER_KEYS):
        return _viewer(value, steps, trail, kinds, aux)
    if form == "compressed":
        plain = decompress(value)
        if not (isinstance(plain, dict) and "uid_repository" in plain and "data" in plain):
            held = (f"an object with keys {', '.join(sorted(plain)) or 'none'}"
                    if isinstance(plain, dict) else f"a {type(plain).__name__}")
            raise SpecFormatError(f"the compressed export in {where} holds no diagram spec "
                                  f"but {held}", "data")
        return _roots(plain, steps, trail, kinds + ["compressed"], aux)
    if "export_form" in value and form not in PLAIN_FORMS:
        raise SpecFormatError(f"unknown export_form {form!r} (pyncd writes uid_references or "
                              "compressed)", "export_form")
    if "uid_repository" in value and "data" in value:
        return _roots(value, steps, trail, kinds + ["plain"], aux)
    if value and all(isinstance(v, dict) for v in value.values()) and not (
            {"uid_repository", "data", "export_form"} & set(value)):
        return _bundle(value, steps, trail, kinds, aux)
    keys = ", ".join(sorted(value)) or "none"
    raise SpecFormatError(f"not a pyncd diagram spec: {where} is an object with keys {keys} "
                          "(a document has uid_repository and data; the envelopes are the "
                          "compressed export, the viewer's {data, settings, auxiliary} and a "
                          "bundle of named documents)")


def _is_term(data) -> bool:
    """A term (or list of terms) as a document's data holds, not a document."""
    first = data[0] if isinstance(data, list) and data else data
    return isinstance(first, dict) and "__type__" in first


def _viewer(value: dict, steps, trail, kinds, aux) -> Opened:
    if "msgType" in value and value.get("msgType") != "dataUpdate":
        raise SpecFormatError(f"viewer message of type {value.get('msgType')!r} carries no "
                              "diagram (expected 'dataUpdate')", "msgType")
    if "data" not in value:
        raise SpecFormatError("the viewer message has no data", "data")
    inner = value["data"]
    if isinstance(inner, str):
        try:
            inner = parse_strict(inner)
        except JsonTextError as exc:
            raise SpecFormatError(f"the wrapped document is not valid JSON: {exc.reason} "
                                  f"at offset {exc.offset}", "data") from None
    own = value.get("auxiliary")
    if own is not None and not isinstance(own, dict):
        raise SpecFormatError("the viewer's auxiliary is an object", "auxiliary")
    return _open(inner, steps, trail, kinds + ["viewer"], own if own is not None else aux)


def _bundle(value: dict, steps, trail, kinds, aux) -> Opened:
    names = list(value)
    if not steps:
        listed = ", ".join("#" + "/".join(trail + [n]) for n in names)
        raise SpecFormatError(f"{_named(trail)} is a bundle of {len(names)} documents; name "
                              f"one as FILE#NAME: {listed}")
    # the longest run of steps that names a member: a name may itself hold a "/"
    cut = next((k for k in range(len(steps), 0, -1) if "/".join(steps[:k]) in value), 1)
    name, rest = "/".join(steps[:cut]), steps[cut:]
    if name not in value:
        raise SpecFormatError(f"{_named(trail)} has no document {name!r}; its "
                              f"documents: {', '.join(names)}")
    return _open(value[name], rest, trail + [name], kinds + ["bundle"], aux)


def _roots(doc: dict, steps, trail, kinds, aux) -> Opened:
    data = doc["data"]
    envelope = "/".join(kinds)
    if not isinstance(data, list):
        if steps:
            raise SpecFormatError(f"{_named(trail)} is one diagram: nothing in it is named "
                                  f"{'/'.join(steps)!r}")
        return Opened(doc, data, "data", envelope, aux, "/".join(trail) or None)
    if not data:
        raise SpecFormatError("data is an empty list: the document has no root", "data")
    if not steps and len(data) > 1:
        listed = ", ".join("#" + "/".join(trail + [str(i)]) for i in range(len(data)))
        raise SpecFormatError(f"{_named(trail)} has {len(data)} roots (its data is a list of "
                              f"terms); name one as FILE#INDEX: {listed}", "data")
    index = steps[0] if steps else "0"
    if not (index.isdigit() and int(index) < len(data)):
        raise SpecFormatError(f"{_named(trail)} has roots 0 to {len(data) - 1}, not "
                              f"{index!r}", "data")
    if len(steps) > 1:
        raise SpecFormatError(f"root {index} of {_named(trail)} is one diagram: nothing in it "
                              f"is named {'/'.join(steps[1:])!r}")
    return Opened(doc, data[int(index)], f"data[{int(index)}]", envelope, aux,
                  "/".join(trail + [index]))


def decompress(doc: dict):
    """The value a compressed export holds, decoded in one pass (records refer only
    backwards)."""
    if doc.get("version") != 1:
        raise SpecFormatError(f"unsupported compressed export version {doc.get('version')!r}",
                              "version")
    records = doc.get("value_repository")
    if not isinstance(records, list):
        raise SpecFormatError("value_repository must be a list", "value_repository")
    values: list = []
    for i, rec in enumerate(records):
        where = f"value_repository[{i}]"
        if not (isinstance(rec, list) and len(rec) == 2 and isinstance(rec[0], int)):
            raise SpecFormatError("a record is [kind, payload]", where)
        values.append(_record(rec[0], rec[1], values, i, where))
    root = doc.get("data")
    if not isinstance(root, int) or not 0 <= root < len(values):
        raise SpecFormatError("data must index a record", "data")
    return values[root]


def _record(kind: int, payload, values: list, i: int, where: str):
    """The value of record ``i`` of kind ``kind``; ``values`` holds the records before it."""
    if kind == SCALAR:
        if isinstance(payload, (list, dict)):
            raise SpecFormatError("a scalar record holds a scalar", where)
        if isinstance(payload, float) and not math.isfinite(payload):
            raise SpecFormatError("non-finite number", where)
        return payload
    if kind == ARRAY:
        return [values[_index(j, i, where)] for j in _payload_list(payload, where)]
    if kind != OBJECT:
        raise SpecFormatError(f"unknown record kind {kind!r}", where)
    flat = _payload_list(payload, where)
    if len(flat) % 2:
        raise SpecFormatError("an object record holds key/value pairs", where)
    obj = {}
    for a in range(0, len(flat), 2):
        key = values[_index(flat[a], i, where)]
        if not isinstance(key, str):
            raise SpecFormatError("object keys must be string records", where)
        if key in obj:
            raise SpecFormatError(f"repeated key {key!r}", where)
        obj[key] = values[_index(flat[a + 1], i, where)]
    return obj


def _payload_list(payload, where):
    if not isinstance(payload, list):
        raise SpecFormatError("payload must be a list of record indices", where)
    return payload


def _index(j, i, where):
    if not isinstance(j, int) or isinstance(j, bool) or not 0 <= j < i:
        raise SpecFormatError(f"reference {j!r} is not to an earlier record", where)
    return j
