"""The builder's fast paths for usual shapes decode exactly what the generic decoders decode,
and leave every unusual shape (and so every error) to them."""
from __future__ import annotations

import copy
import dataclasses

import pytest

import ncdc
from ncdc.ir.errors import SpecDecodeError
from ncdc.spec import terms_types
from ncdc.spec.builder import Builder
from ncdc.spec.jsontext import parse_salvage
from ncdc.spec.loader import read_text


@pytest.fixture(scope="module")
def repository():
    value, _ = parse_salvage(read_text(ncdc.bundled_spec_path()))
    return value.partial["uid_repository"]


def _fields(tag):
    return {f.name: getattr(tag, f.name) for f in dataclasses.fields(tag)}


def _generic(monkeypatch):
    monkeypatch.setattr(terms_types, "_usual_tag", lambda obj, path: None)


def test_every_bundled_tag_decodes_as_the_generic_decoders_do(repository, monkeypatch):
    keys = [k for k, r in repository.items() if r.get("__type__") == "BlockTag"]
    assert len(keys) > 1000
    fast_builder = Builder(repository)
    fast = {k: fast_builder.ref({"__ref__": int(k)}, k) for k in keys}
    usual = sum(terms_types._usual_tag(repository[k], k) is not None for k in keys)
    assert usual > 0.9 * len(keys)            # the fast path takes nearly all of them
    _generic(monkeypatch)
    slow_builder = Builder(repository)
    for k in keys:
        slow = slow_builder.ref({"__ref__": int(k)}, k)
        assert _fields(fast[k]) == _fields(slow) and fast[k].path == slow.path
        assert type(fast[k].repetition) is type(slow.repetition)


TAG = {"__type__": "BlockTag",
       "uid": {"__type__": "UID", "_id": 7, "_name": None},
       "repetition": {"__type__": "Integer", "_value": 1},
       "aesthetics": {"__type__": "BlockAesthetics", "title": "t", "description": None,
                      "fill_color": None, "references": None, "formula": "y = x",
                      "drawing": {"__registered__": "enum", "type": "BlockDrawing",
                                  "name": "BODY_IN_PLACE"}}}


def _spoil(where, value):
    obj = copy.deepcopy(TAG)
    *outer, last = where
    target = obj
    for k in outer:
        target = target[k]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return obj


@pytest.mark.parametrize("where, value", [
    (("uid", "_id"), True), (("uid", "_id"), "7"), (("uid", "_name"), 3),
    (("uid", "__type__"), "Integer"), (("repetition", "_value"), True),
    (("repetition", "_value"), [1]), (("repetition",), None), (("aesthetics", "title"), None),
    (("aesthetics", "title"), KeyError), (("aesthetics", "formula"), 1.5),
    (("aesthetics", "drawing"), {"__registered__": "enum", "type": "BlockDrawing",
                                 "name": "NO_SUCH"}),
    (("aesthetics", "drawing"), {"__registered__": "enum", "type": "Op", "name": 1}),
    (("aesthetics", "references"), [{"__type__": "Integer", "_value": 1}]),
    (("aesthetics", "references"), [{"__type__": "CodeReference", "line": "3"}]),
    (("aesthetics", "references"), [{"__type__": "CodeReference", "url": "u", "line": 3}]),
    (("aesthetics", "references"), {"__type__": "CodeReference"}),
])
def test_an_unusual_tag_fails_or_decodes_as_the_generic_decoders_do(where, value,
                                                                    monkeypatch):
    obj = _spoil(where, value)

    def outcome():
        try:
            return _fields(Builder({"7": obj}).ref({"__ref__": 7}, "x"))
        except SpecDecodeError as exc:
            return ("error", str(exc))

    fast = outcome()
    _generic(monkeypatch)
    assert fast == outcome()


def test_the_usual_tag_takes_the_fast_path():
    tag = terms_types._usual_tag(copy.deepcopy(TAG), "p")
    Builder({"7": TAG}).ref({"__ref__": 7}, "x")     # the drawing is seen: memoised
    tag = terms_types._usual_tag(copy.deepcopy(TAG), "p")
    assert tag is not None and tag.formula == "y = x" and tag.path == "p"
    assert tag.repetition == 1 and tag.drawing.name == "BODY_IN_PLACE"
