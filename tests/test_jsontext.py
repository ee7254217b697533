"""spec.jsontext: strict loading with exact error locations, and salvage of cut JSON texts."""

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ncdc.spec.jsontext import (
    MAX_DEPTH,
    Incomplete,
    JsonTextError,
    SalvageReport,
    parse_salvage,
    parse_strict,
)

DELIVERED = Path(__file__).resolve().parents[1] / "ncdc" / "data" / "deepseek_v41_flash.json"
"""The bundled spec: byte-identical to the delivered file (checked in test_spec_bundled)."""

# The delivered file: valid JSON text up to offset 1889720, where the raw newline of the
# garbage "\n\ntsncd" appears inside the (cut) key string '"__r' that starts at 1889716.
CUT = 1_889_720
KEY_START = 1_889_716
SHAPE0 = ("data.content[4].body.content[0].body.content[1].content[2].operator.block.body"
          ".content[1].output_weaves[0]._shape[0]")


@pytest.fixture(scope="module")
def delivered_text():
    return DELIVERED.read_text(encoding="utf-8")


def container_chain(value):
    """The chain of Incomplete containers from ``value`` down to the innermost one."""
    chain = []
    while isinstance(value, Incomplete) and value.partial is not None:
        chain.append(value)
        members = list(value.partial.values()) if isinstance(value.partial, dict) else value.partial
        value = members[-1] if members else None
    return chain


def strict_error(text) -> JsonTextError:
    with pytest.raises(JsonTextError) as info:
        parse_strict(text)
    return info.value


# ------------------------------------------------------------------------- the delivered file


def test_delivered_strict(delivered_text):
    assert len(delivered_text) == 1_889_727
    err = strict_error(delivered_text)
    # The offset is where the text stops being JSON (the raw newline), not the key's start.
    assert err.offset == CUT
    assert (err.line, err.column) == (1, CUT + 1)
    assert err.json_path.startswith("data.content[4]")
    assert "_shape" in err.json_path
    assert err.json_path == SHAPE0
    assert err.headline == "ends inside a string"
    assert "control character" in err.reason
    assert str(err).startswith(
        f"JSON text ends inside a string at offset {CUT} (line 1, column {CUT + 1}), "
        "in data.content[4].")


def test_delivered_salvage(delivered_text):
    value, report = parse_salvage(delivered_text)
    assert report.complete is False and not report.valid
    assert report.cut_offset == CUT
    assert (report.cut_line, report.cut_column) == (1, CUT + 1)
    assert report.cut_path == SHAPE0
    assert report.trailing_garbage == "\n\ntsncd"
    assert "tsncd" in report.trailing_garbage

    assert isinstance(value, Incomplete) and value.kind == "object"
    assert value.json_path == "" and value.offset == 0
    repo = value.partial["uid_repository"]
    assert not isinstance(repo, Incomplete) and len(repo) == 1297

    data = value.partial["data"]
    assert isinstance(data, Incomplete) and data.kind == "object" and data.json_path == "data"
    content = data.partial["content"]
    assert isinstance(content, Incomplete) and content.kind == "array"
    assert len(content.partial) == 5
    assert not any(isinstance(item, Incomplete) for item in content.partial[:4])
    assert isinstance(content.partial[4], Incomplete)
    assert content.partial[4].json_path == "data.content[4]"

    chain = container_chain(value)
    assert [c.json_path for c in chain] == report.open_paths
    assert report.open_paths[:4] == ["", "data", "data.content", "data.content[4]"]
    assert report.open_paths[-1] == SHAPE0
    # outermost first: each path extends the previous one
    for outer, inner in itertools.pairwise(report.open_paths):
        assert inner.startswith(outer) and len(inner) > len(outer)
    innermost = chain[-1]
    assert innermost.kind == "object" and innermost.partial == {}
    assert innermost.offset == KEY_START - 1
    assert innermost.dangling_key == '"__r'
    shape = chain[-2]
    assert shape.kind == "array" and shape.partial == [innermost]

    # Complete members agree with a json.loads of the repaired text.
    closers = "".join("}" if c.kind == "object" else "]" for c in reversed(chain))
    repaired = json.loads(delivered_text[:KEY_START] + closers)
    assert repaired["uid_repository"] == repo
    assert repaired["data"]["content"][:4] == content.partial[:4]


# ---------------------------------------------------------------------------- hand-made cases


def test_complete_document():
    text = json.dumps({"a": [1, 2.5, {"b": None, "c": True}], "d": "x\u00e9\n"}, indent=2)
    value, report = parse_salvage(text)
    assert value == json.loads(text)
    assert report == SalvageReport(complete=True)
    assert report.valid and report.trailing_garbage is None and report.open_paths == []
    assert parse_strict(text) == json.loads(text)


def test_cut_inside_key():
    value, report = parse_salvage('{"a": 1, "bc')
    assert value.kind == "object" and value.partial == {"a": 1}
    assert value.dangling_key == '"bc'
    assert report.cut_offset == 12 and report.cut_path == "" and report.open_paths == [""]
    assert report.trailing_garbage is None
    err = strict_error('{"a": 1, "bc')
    assert (err.offset, err.json_path, err.headline) == (12, "", "ends inside a string")


def test_cut_inside_number():
    value, report = parse_salvage('{"a": [1, 23')
    arr = value.partial["a"]
    assert arr.kind == "array" and arr.partial[0] == 1
    leaf = arr.partial[1]
    assert (leaf.kind, leaf.raw, leaf.json_path, leaf.offset, leaf.partial) == (
        "number", "23", "a[1]", 10, None)
    assert report.cut_path == "a[1]" and report.open_paths == ["", "a"]
    err = strict_error('{"a": [1, 23')
    assert (err.offset, err.json_path, err.reason) == (12, "a[1]", "text ends inside a number")
    # a number ending exactly at the cut is incomplete, even if valid by itself
    value, _ = parse_salvage("[1.5e3")
    assert value.partial[0].kind == "number" and value.partial[0].raw == "1.5e3"
    value, _ = parse_salvage("[1.5e3 ")
    assert value.partial == [1500.0]


def test_cut_after_comma():
    value, report = parse_salvage('[1, "x", ')
    assert value.partial == [1, "x"]
    assert (report.cut_offset, report.cut_path, report.reason) == (
        9, "", "text ends inside an array")
    value, report = parse_salvage('{"a": 1, ')
    assert value.partial == {"a": 1} and value.dangling_key is None


def test_cut_after_colon():
    value, report = parse_salvage('{"a": {"b": 2}, "c": ')
    assert value.partial == {"a": {"b": 2}}
    assert value.dangling_key == '"c"'
    assert report.cut_path == "" and report.open_paths == [""]
    err = strict_error('{"a": {"b": 2}, "c": ')
    assert (err.offset, err.json_path, err.headline) == (21, "", "ends inside an object")


def test_cut_inside_nested_arrays():
    value, report = parse_salvage("[[1, [2, [3, [")
    assert report.open_paths == ["", "[0]", "[0][1]", "[0][1][1]", "[0][1][1][1]"]
    chain = container_chain(value)
    assert [c.json_path for c in chain] == report.open_paths
    assert chain[0].partial == [chain[1]]
    assert chain[1].partial == [1, chain[2]]
    assert chain[3].partial == [3, chain[4]]
    assert chain[4].partial == []
    assert report.cut_path == "[0][1][1][1]"


def test_cut_inside_string_value():
    value, report = parse_salvage('{"k": ["ab\\u00')
    leaf = value.partial["k"].partial[0]
    assert (leaf.kind, leaf.raw, leaf.json_path) == ("string", '"ab\\u00', "k[0]")
    assert report.cut_offset == 14 and report.trailing_garbage is None


def test_garbage_after_complete_document():
    err = strict_error('{"a": [1]}\n xyz')
    assert (err.offset, err.line, err.column) == (12, 2, 2)
    assert err.reason == "extra data after the document"
    assert err.json_path == ""
    value, report = parse_salvage('{"a": [1]}\n xyz')
    assert value == {"a": [1]}
    assert report.complete is True and not report.valid
    assert report.trailing_garbage == "xyz" and report.cut_offset == 12
    assert report.open_paths == []


def test_unexpected_character_mid_document():
    text = '{"a": {"b": [1, 2, @]}, "c": 3}'
    err = strict_error(text)
    assert err.offset == text.index("@")
    assert err.json_path == "a.b" and err.headline == "is invalid"
    assert err.reason == "unexpected character '@'"
    # 't' may start 'true': the text stops being JSON at the ']' after it
    text = '{"a": {"b": [1, 2, t]}, "c": 3}'
    err = strict_error(text)
    assert (err.offset, err.json_path) == (text.index("]"), "a.b[2]")
    assert err.reason == "unexpected character ']' in a literal"
    text = '{"a": {"b": [1, 2 x]}, "c": 3}'
    err = strict_error(text)
    assert err.offset == text.index("x")
    assert err.reason.startswith("unexpected character 'x'")
    value, report = parse_salvage(text)
    assert value.partial["a"].partial["b"].partial == [1, 2]
    assert report.trailing_garbage == 'x]}, "c": 3}'
    assert report.open_paths == ["", "a", "a.b"]


def test_raw_control_character_is_a_cut():
    text = '["ok", "abc\n\ngarbage'
    value, report = parse_salvage(text)
    assert value.partial[0] == "ok"
    assert value.partial[1].raw == '"abc'
    assert report.cut_offset == 11 and report.trailing_garbage == "\n\ngarbage"
    assert strict_error(text).headline == "ends inside a string"


@pytest.mark.parametrize("text", ["", "   ", "x", "]"])
def test_no_value(text):
    value, report = parse_salvage(text)
    assert value is None and report.complete is False
    strict_error(text)


def test_error_str_and_repr():
    err = strict_error('[1, {"a": "xy')
    assert str(err) == ("JSON text ends inside a string at offset 13 (line 1, column 14), "
                        "in [1].a: text ends inside a string")
    value, _ = parse_salvage('[1, {"a": "xy')
    assert "kind='array'" in repr(value) and "1 complete + 1 incomplete items" in repr(value)
    assert repr(value.partial[1].partial["a"]) == (
        "Incomplete(kind='string', json_path='[1].a', offset=10, raw='\"xy')")


@pytest.mark.slow
def test_deep_nesting_never_raises_recursion_error():
    deep = 1500  # beyond json's own C recursion limit, within MAX_DEPTH
    text = "[" * deep + "]" * deep
    value = parse_strict(text)
    for _ in range(deep - 1):
        assert len(value) == 1
        value = value[0]
    assert value == []
    _, report = parse_salvage(text)
    assert report.valid

    text = "[" * (3 * MAX_DEPTH) + "]" * (3 * MAX_DEPTH)
    err = strict_error(text)
    assert err.reason == "nesting too deep" and err.offset == MAX_DEPTH
    _, report = parse_salvage(text)
    assert report.reason == "nesting too deep" and len(report.open_paths) == MAX_DEPTH
    assert report.cut_offset == MAX_DEPTH

    value, report = parse_salvage("[" * 100_000)
    assert report.reason == "nesting too deep"


# ---------------------------------------------------------------------------------- properties

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=5), children, max_size=5),
    max_leaves=30,
)


@st.composite
def json_texts(draw):
    doc = draw(json_values)
    text = json.dumps(doc, indent=draw(st.sampled_from([None, 0, 1])),
                      ensure_ascii=draw(st.booleans()))
    return doc, text


def check_against(value, orig):
    """Every complete value in ``value`` equals the corresponding part of ``orig``."""
    if not isinstance(value, Incomplete):
        assert value == orig and type(value) is type(orig)
        return
    if value.kind == "object":
        assert isinstance(orig, dict)
        keys = list(value.partial)
        assert keys == list(orig)[:len(keys)]
        for key in keys:
            check_against(value.partial[key], orig[key])
    elif value.kind == "array":
        assert isinstance(orig, list) and len(value.partial) <= len(orig)
        for item, o in zip(value.partial, orig, strict=False):  # partial: a prefix
            check_against(item, o)
    else:
        assert value.partial is None and value.raw
        expected = {"string": str, "number": (int, float), "literal": (bool, type(None))}
        assert isinstance(orig, expected[value.kind]) and not (
            value.kind == "number" and isinstance(orig, bool))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_texts(), st.data())
def test_salvage_of_cut_documents(doc_text, data):
    doc, text = doc_text
    k = data.draw(st.integers(min_value=0, max_value=len(text)), label="cut")
    prefix = text[:k]
    value, report = parse_salvage(prefix)
    if k == len(text):
        assert report.valid and value == json.loads(text) == doc
        assert parse_strict(prefix) == doc
        return
    if report.valid:  # e.g. "12" cut from "123", or "[1]" from "[1]\n"
        assert value == json.loads(prefix)
        return
    if value is None:  # nothing but whitespace
        assert not prefix.strip() and not report.complete
        return
    # A prefix of valid JSON is never garbage: the cut is the end of the text.
    assert report.cut_offset == k and report.trailing_garbage is None
    assert not report.complete
    check_against(value, doc)
    assert [c.json_path for c in container_chain(value)] == report.open_paths
    err = strict_error(prefix)
    assert (err.offset, err.json_path) == (k, report.cut_path)


_MUTATION_CHARS = st.sampled_from(list('{}[]:,"\\ \n\t0123456789-.eE+truefalsnNIx\x00\x1f\u00e9'))


@st.composite
def mutated_texts(draw):
    _, text = draw(json_texts())
    chars = list(text)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        op = draw(st.sampled_from(["replace", "insert", "delete"]))
        i = draw(st.integers(min_value=0, max_value=len(chars)))
        if op == "insert":
            chars.insert(i, draw(_MUTATION_CHARS))
        elif chars and i < len(chars):
            if op == "replace":
                chars[i] = draw(_MUTATION_CHARS)
            else:
                del chars[i]
    return "".join(chars)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(mutated_texts())
def test_mutations(text):
    def no_repeats(pairs):  # ncdc rejects repeated keys in every envelope (json.loads keeps the last)
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise ValueError("repeated key")
        return dict(pairs)

    try:
        expected = json.loads(text, object_pairs_hook=no_repeats)
    except ValueError:
        expected = JsonTextError
    value, report = parse_salvage(text)
    if expected is JsonTextError:
        err = strict_error(text)
        assert not report.valid
        assert err.offset == report.cut_offset and err.json_path == report.cut_path
        assert err.reason == report.reason
        assert report.trailing_garbage == (text[err.offset:] or None)
        assert 1 <= err.line and 1 <= err.column
    else:
        # compare as text: NaN literals compare unequal to themselves
        assert json.dumps(parse_strict(text)) == json.dumps(expected)
        assert report.valid and json.dumps(value) == json.dumps(expected)


@pytest.mark.parametrize("text", ['{"a": [1, 2], "b": {"c": 3', '{"a": 1} x', '[{"a": 1}, [2'])
def test_a_root_that_cannot_close_is_not_bulk_decoded(text, monkeypatch):
    """A text that does not end with a closer is walked from its root: the bulk decode of the
    root, which would scan the whole text only to fail, is not tried; the members still are, and
    the result is the one the walk from a tried root gives."""
    from ncdc.spec import jsontext

    tried = []
    real = jsontext._raw_decode

    def spy(s, pos):
        tried.append(pos)
        return real(s, pos)

    monkeypatch.setattr(jsontext, "_raw_decode", spy)
    value, report = parse_salvage(text)
    assert 0 not in tried and tried
    monkeypatch.setattr(jsontext._Walker, "__init__", _tried_root(jsontext._Walker.__init__))
    again, report_again = parse_salvage(text)
    assert 0 in tried
    assert value == again and report == report_again


def _tried_root(init):
    def tried_root(self, text):
        init(self, text)
        self.open_end = False
    return tried_root
