"""The builder's fast paths for usual shapes decode exactly what the generic decoders decode,
and leave every unusual shape (and so every error) to them."""
from __future__ import annotations

import copy
import dataclasses

import pytest

import ncdc
from ncdc.ir.errors import SpecDecodeError
from ncdc.spec import terms_morphisms, terms_types
from ncdc.spec.builder import Builder
from ncdc.spec.jsontext import parse_salvage
from ncdc.spec.loader import load_path, read_text


@pytest.fixture(scope="module")
def repository():
    value, _ = parse_salvage(read_text(ncdc.bundled_spec_path()))
    return value.partial["uid_repository"]


def _fields(tag):
    return {f.name: getattr(tag, f.name) for f in dataclasses.fields(tag)}


def _generic(monkeypatch):
    monkeypatch.setattr(terms_types, "_usual_tag", lambda obj, path: None)
    monkeypatch.setattr(terms_types, "_quantified_key", lambda obj: None)
    monkeypatch.setattr(terms_types, "_cached_shape", lambda b, obj, name="_shape": None)
    monkeypatch.setattr(terms_morphisms, "_cached_shape", lambda b, obj, name="_shape": None)


def test_the_bundled_spec_decodes_as_with_the_generic_decoders(monkeypatch):
    fast = load_path(ncdc.bundled_spec_path(), salvage=True)
    _generic(monkeypatch)
    slow = load_path(ncdc.bundled_spec_path(), salvage=True)
    assert repr(fast.data) == repr(slow.data) and len(repr(fast.data)) > 100_000
    assert [t.path for t in fast.truncated] == [t.path for t in slow.truncated]
    assert {k: _fields(t) for k, t in fast.tags.items()} == {
        k: _fields(t) for k, t in slow.tags.items()}


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
    (("aesthetics", "references"), [{"__type__": "CodeReference", "url": "u", "line": True}]),
    (("aesthetics", "references"), [{"__type__": "CodeReference", "url": ["u"]}]),
])
def test_an_unusual_tag_fails_or_decodes_as_the_generic_decoders_do(where, value,
                                                                    monkeypatch):
    obj = _spoil(where, value)

    def outcome():
        good = _spoil(("aesthetics", "references"), [{"__type__": "CodeReference", "url": "u",
                                                      "line": 1}])
        Builder({"7": good}).ref({"__ref__": 7}, "x")  # the memos hold the usual values
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


AXIS = {"__type__": "RawAxis", "uid": {"__type__": "UID", "_id": 3, "_name": "n"},
        "_size": {"__type__": "Integer", "_value": 4}}
QUANTIFIED = {"__type__": "Quantified", "wraps": {"__type__": "Reals"},
              "size": {"__type__": "Integer", "_value": 32},
              "vector": {"__type__": "Integer", "_value": 1}, "scale": None,
              "form": {"__registered__": "enum", "type": "Encoding", "name": "FP32"}}


@pytest.mark.parametrize("kind", ["Weave", "Array"])
@pytest.mark.parametrize("change", [
    {}, {"_shape": [{"__ref__": 3}, {"__ref__": 3}]}, {"_shape": [{"__ref__": True}]},
    {"_shape": [{"__ref__": 9}]}, {"_shape": [{"__ref__": "3"}]}, {"_shape": {"__ref__": 3}},
    {"_shape": [{"__registered__": "enum", "type": "WeaveMode", "name": "TILED"}]},
    {"_shape": [{"__registered__": "enum", "type": "Encoding", "name": "FP32"}]},
    {"_shape": [None]}, {"datatype": dict(QUANTIFIED, size={"__type__": "Integer",
                                                            "_value": True})},
    {"datatype": dict(QUANTIFIED, size={"__type__": "Integer", "_value": 0})},
    {"datatype": dict(QUANTIFIED, size={"__type__": "Integer", "_value": 1 << 20})},
    {"datatype": dict(QUANTIFIED, vector=None)},
    {"datatype": dict(QUANTIFIED, scale=5)},
    {"datatype": dict(QUANTIFIED, form={"__registered__": "enum", "type": "Encoding",
                                        "name": "NOPE"})},
    {"datatype": dict(QUANTIFIED, form={"__registered__": "enum", "type": "BlockDrawing",
                                        "name": "BODY_IN_PLACE"})},
    {"datatype": dict(QUANTIFIED, wraps={"__type__": "Reals", "__ref__": 3})},
    {"datatype": {k: v for k, v in QUANTIFIED.items() if k != "vector"}},
])
def test_an_array_or_weave_decodes_or_fails_as_with_the_generic_decoders(kind, change,
                                                                          monkeypatch):
    obj = {"__type__": kind, "_shape": [{"__ref__": 3}], "datatype": QUANTIFIED, **change}

    def outcome():
        b = Builder({"3": AXIS})
        b.ref({"__ref__": 3}, "axis")
        for _ in range(2):  # the second time from the memos
            try:
                got = repr(b.term(copy.deepcopy(obj), "x"))
            except SpecDecodeError as exc:
                got = ("error", str(exc))
        return got

    fast = outcome()
    _generic(monkeypatch)
    assert fast == outcome()


@pytest.mark.parametrize("dom", [
    [{"__ref__": 3}, {"__ref__": 3}], [{"__ref__": 9}], [{"__ref__": True}], {"__ref__": 3},
    [{"__registered__": "enum", "type": "WeaveMode", "name": "TILED"}], [],
])
def test_a_rearrangement_decodes_or_fails_as_with_the_generic_decoders(dom, monkeypatch):
    obj = {"__type__": "Rearrangement", "mapping": [0], "_dom": dom}

    def outcome():
        b = Builder({"3": AXIS})
        b.ref({"__ref__": 3}, "axis")
        b.term({"__registered__": "enum", "type": "WeaveMode", "name": "TILED"}, "t")
        try:
            return repr(b.term(copy.deepcopy(obj), "x"))
        except SpecDecodeError as exc:
            return ("error", str(exc))

    fast = outcome()
    _generic(monkeypatch)
    assert fast == outcome()
