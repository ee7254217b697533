"""The three document envelopes pyncd tools write, reduced to the plain document.

* plain: ``{"uid_repository": {...}, "data": <morphism>}``;
* compressed: ``{"export_form": "compressed", "version": 1, "value_repository": [...],
  "data": <root index>}``, records ``[kind, payload]`` referring only to earlier records;
* viewer wrapper: ``{"msgType": "dataUpdate", "data": "<the document as a JSON string>"}``.
"""
from __future__ import annotations

import math

from ncdc.ir.errors import SpecFormatError

from .jsontext import JsonTextError, parse_strict

SCALAR, ARRAY, OBJECT = 0, 1, 2


def unwrap(doc: object, depth: int = 0) -> tuple[dict, str]:
    """The plain document inside ``doc`` and the name of the envelope it came in."""
    if not isinstance(doc, dict):
        raise SpecFormatError(f"a spec document is a JSON object, not {type(doc).__name__}")
    if "msgType" in doc:
        if depth > 3:
            raise SpecFormatError("viewer wrappers nested too deeply")
        if doc.get("msgType") != "dataUpdate":
            raise SpecFormatError(f"viewer message of type {doc.get('msgType')!r} carries no "
                                  "diagram (expected 'dataUpdate')", "msgType")
        inner = doc.get("data")
        if isinstance(inner, str):
            try:
                inner = parse_strict(inner)
            except JsonTextError as exc:
                raise SpecFormatError(f"the wrapped document is not valid JSON: {exc.reason} "
                                      f"at offset {exc.offset}", "data") from None
        plain, kind = unwrap(inner, depth + 1)
        return plain, "viewer/" + kind
    if doc.get("export_form") == "compressed":
        return decompress(doc), "compressed"
    if "export_form" in doc and doc.get("export_form") not in (None, "plain"):
        raise SpecFormatError(f"unknown export_form {doc.get('export_form')!r}", "export_form")
    if "uid_repository" not in doc or "data" not in doc:
        missing = [k for k in ("uid_repository", "data") if k not in doc]
        raise SpecFormatError(f"not a pyncd diagram spec: missing {', '.join(missing)}")
    return doc, "plain"


def decompress(doc: dict) -> dict:
    """Decode the compressed export form in one pass (records refer only backwards)."""
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
    plain = values[root]
    if not isinstance(plain, dict) or "uid_repository" not in plain or "data" not in plain:
        raise SpecFormatError("the compressed root is not a diagram spec", "data")
    return plain


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
