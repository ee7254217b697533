"""The name check's shortcut: a document whose text cannot spell a lone surrogate (ASCII, no
``\\uD`` escape) skips the search; every other text is searched, and a surrogate spelled any
way is still ``name-invalid``."""
from __future__ import annotations

import json

import pytest

import ncdc
from ncdc.spec.loader import _surrogate_free, load_path, load_text
from ncdc.spec.validate import validate
from tests.conftest import ATTENTION_CORE


def _names(diags):
    return [(d.code, d.json_path, d.message) for d in diags if d.code == "name-invalid"]


@pytest.mark.parametrize("text, free", [
    ('{"a": "plain"}', True),
    ('{"a": "\\u0041 \\u00e9"}', True),             # escapes of other characters
    ('{"a": "\\ud800"}', False), ('{"a": "\\uDFFF"}', False),
    ('{"a": "\\ud83d\\ude00"}', False),             # a pair: searched (and valid)
    ('{"a": "\\\\ud800"}', False),                  # an escaped backslash: searched anyway
    ('{"a": "\u00e9"}', False), ('{"a": "\ud800"}', False),  # not ASCII: searched
])
def test_which_texts_skip_the_search(text, free):
    assert _surrogate_free(text) is free


def _titled(title_json: str) -> str:
    """attention_core's text with its first block tag's title spelled ``title_json``."""
    doc = json.loads(ATTENTION_CORE.read_text(encoding="utf-8"))
    tag = next(v for v in doc["uid_repository"].values() if v["__type__"] == "BlockTag")
    tag["aesthetics"]["title"] = "@@TITLE@@"
    return json.dumps(doc).replace('"@@TITLE@@"', title_json)


@pytest.mark.parametrize("title_json, bad", [
    ('"Attention \\ud800 Core"', True),     # an escape in an ASCII text
    ('"Attention \\uDC00 Core"', True),
    ('"Attention \ud800 Core"', True),      # the character itself in the str
    ('"Attention \\ud83d\\ude00 Core"', False),
    ('"Attention \u00e9 Core"', False),
])
def test_a_lone_surrogate_is_found_however_spelled(title_json, bad):
    doc = load_text(_titled(title_json))
    found = _names(validate(doc))
    assert bool(found) is bad
    if bad:
        assert "lone surrogate" in found[0][2] and found[0][1].startswith("uid_repository.")


def test_the_bundled_spec_skips_the_search_and_would_find_nothing():
    doc = load_path(ncdc.bundled_spec_path(), salvage=True)
    assert doc.no_surrogates
    fast = validate(doc)
    searched = load_path(ncdc.bundled_spec_path(), salvage=True)
    searched.no_surrogates = False            # the full search: the same diagnostics
    assert validate(searched) == fast and fast
