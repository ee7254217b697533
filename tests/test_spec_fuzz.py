"""Random mutations and truncations of real specs: loading and validation raise only
``SpecError`` subclasses (never another exception), validation never reports an internal error,
and nothing hangs (hypothesis ``deadline``)."""
from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ncdc
from ncdc.ir.errors import SpecError
from ncdc.spec.jsontext import Incomplete, parse_salvage
from ncdc.spec.loader import load_text
from tests.conftest import ATTENTION_CORE, json_nodes

SETTINGS = settings(max_examples=60, deadline=3000, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


def _plain(value):
    """The salvaged JSON value with its Incomplete markers replaced by what they hold."""
    if isinstance(value, Incomplete):
        value = value.partial
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _reachable(repo: dict, root) -> dict:
    """The repository records ``root`` refers to, transitively."""
    keep, todo = {}, [root]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            rid = v.get("__ref__")
            if isinstance(rid, int) and str(rid) not in keep and str(rid) in repo:
                keep[str(rid)] = repo[str(rid)]
                todo.append(repo[str(rid)])
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
    return keep


class Doc(dict):
    """A JSON document with a short repr (hypothesis prints the test's arguments)."""

    def __repr__(self):
        return f"<document of {len(json.dumps(self))} characters>"


@pytest.fixture(scope="module")
def engram_slice(bundled_text):
    """The Engram of layer 1 box of the bundled spec as a document of its own."""
    value, _ = parse_salvage(bundled_text)
    doc = _plain(value)
    engram = doc["data"]["content"][3]
    return Doc(uid_repository=_reachable(doc["uid_repository"], engram), data=engram)


@pytest.fixture(scope="module")
def attention_doc():
    return Doc(json.loads(ATTENTION_CORE.read_text(encoding="utf-8")))


def _check(text: str, salvage: bool) -> None:
    try:
        spec = ncdc.Spec(load_text(text, "<fuzz>", salvage=salvage))
    except SpecError:
        return
    diags = spec.validate()
    assert not [d for d in diags if d.code == "internal-error"], diags
    spec.validate(spec.bind("tiny"))
    spec.blocks()


_REPLACEMENTS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 10**12), st.floats(allow_nan=True),
    st.text(max_size=6), st.just([]), st.just({}), st.just({"__ref__": 1}),
    st.just({"__type__": "Integer", "_value": 0}),
    st.just({"__registered__": "enum", "type": "WeaveMode", "name": "TILED"}),
    st.lists(st.integers(-2, 5), max_size=3),
)


def _mutate(doc, data) -> dict:
    doc = copy.deepcopy(dict(doc))
    nodes = [(p, v) for p, v in json_nodes(doc) if p]
    kind = data.draw(st.sampled_from(["delete", "retype", "replace", "graft"]))
    containers = [(p, v) for p, v in json_nodes(doc) if isinstance(v, (dict, list)) and v]
    if not containers or not nodes:
        return doc
    _, parent = data.draw(st.sampled_from(containers))
    keys = list(parent) if isinstance(parent, dict) else list(range(len(parent)))
    key = data.draw(st.sampled_from(keys))
    if kind == "delete":
        del parent[key]
    elif kind == "retype":
        old = parent[key]
        parent[key] = ({"x": old} if isinstance(old, list) else [old] if isinstance(old, dict)
                       else str(old) if not isinstance(old, str) else 7)
    elif kind == "replace":
        parent[key] = data.draw(_REPLACEMENTS)
    else:
        _, other = data.draw(st.sampled_from(nodes))
        parent[key] = copy.deepcopy(other) if other is not parent else None
    return doc


@SETTINGS
@given(data=st.data())
def test_mutations_of_attention_core(attention_doc, data):
    doc = _mutate(attention_doc, data)
    _check(json.dumps(doc), salvage=False)


@pytest.mark.slow
@SETTINGS
@given(data=st.data())
def test_mutations_of_a_bundled_slice(engram_slice, data):
    doc = _mutate(engram_slice, data)
    _check(json.dumps(doc), salvage=False)


@settings(max_examples=40, deadline=3000, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(frac=st.floats(0, 1), salvage=st.booleans(), garbage=st.sampled_from(["", "\n\nxyz", "]"]))
def test_truncations(attention_doc, frac, salvage, garbage):
    text = json.dumps(attention_doc)
    _check(text[:int(frac * len(text))] + garbage, salvage=salvage)


def test_slice_is_a_real_spec(engram_slice):
    spec = ncdc.Spec(load_text(json.dumps(engram_slice), "<slice>"))
    assert spec.blocks()[0].node.title == "Engram of Layer 1"
    assert not [d for d in spec.validate() if d.severity == "error"]
