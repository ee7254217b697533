"""``ncdc validate --salvage``: the block tags of the repository that label no block of the
data, grouped by block title, for the truncated bundled spec and for a small hand-made one.
The expected figures are counted from the JSON text with regular expressions, not with
ncdc's decoder."""
from __future__ import annotations

import json
import re

from ncdc.api import bundled_spec_path
from ncdc.cli import main

TAG_RECORD = re.compile(r'"(\d+)": \{"__type__": "BlockTag"')
TAG_USE = re.compile(r'"block_tag": \{"__ref__": (\d+)\}')
TITLE = re.compile(r'"title": "((?:[^"\\]|\\.)*)"')


def _validate_json(capsys, *argv):
    rc = main(["validate", "--json", *argv])
    return rc, json.loads(capsys.readouterr().out)


def test_bundled_lists_every_tag_without_a_body(capsys):
    text = open(bundled_spec_path(), encoding="utf-8").read()
    start = text.index('"data":', text.index('"uid_repository"') + 20)
    tags = TAG_RECORD.findall(text[:start])
    used = set(TAG_USE.findall(text[start:]))
    bodiless = [t for t in tags if t not in used]
    rc, out = _validate_json(capsys)
    assert rc == 0
    groups = out["salvage"]["bodiless_tags"]
    listed = [str(u) for g in groups for u in g["tags"]]
    assert len(tags) == 1168 and sorted(listed) == sorted(bodiless)
    assert len(listed) == 1047
    by_title = {g["title"]: g for g in groups}
    # titles the bundled prefix has no body for (docs/format.md §15, issue 23)
    for title in ("Lightning Indexer", "Candidate Pool", "Reindex Group", "Reuse Layer",
                  "Encoder Group", "Output Probabilities"):
        assert by_title[title]["bodies"] == [], title
    # the cut layer is inferred to be the Sliding Window Layer whose tag has no body
    swl = by_title["Sliding Window Layer"]
    assert swl["cut"] == ["data.content[4]"] and swl["bodies"] == ["data.content[2]"]
    assert swl["tags"] == [801975698]
    # repository order: every tag without a body is written after the last one the data uses
    assert sum(g["past_cut"] for g in groups) == 1047


def test_bundled_text_names_the_groups(capsys):
    assert main(["validate", "--salvage"]) == 0
    out = capsys.readouterr().out
    assert "block tags with no body (1047 tags of 83 block titles" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("- Lightning Indexer:"))
    assert "3 tags" in line and "no block of that title has a body" in line


def test_hand_made_spec_with_unused_tags(mk, tmp_path, capsys):
    x, y = mk.axis("x", 4), mk.axis("y", 3)
    used = mk.tag("Layer")
    spare = [mk.tag("Layer"), mk.tag("Head"), mk.tag("Layer")]
    lin = mk.bc(mk.op("Linear", "W", bias=False), [mk.weave(["*", x])], [mk.weave(["*", x])],
                [mk.rearr([0], [y])])
    path = tmp_path / "spare.json"
    path.write_text(json.dumps(mk.doc(mk.block(lin, used))))
    rc, out = _validate_json(capsys, "--salvage", str(path))
    assert rc == 0
    groups = out["salvage"]["bodiless_tags"]
    assert [(g["title"], g["tags"], g["bodies"]) for g in groups] == [
        ("Layer", [spare[0], spare[2]], ["data"]), ("Head", [spare[1]], [])]
    assert main(["validate", "--salvage", str(path)]) == 0
    text = capsys.readouterr().out
    assert "block tags with no body (3 tags of 2 block titles" in text
    assert f"- Head: 1 tag (#{spare[1]}); no block of that title has a body" in text


def test_complete_spec_without_spare_tags_says_none(mk, tmp_path, capsys):
    x, y = mk.axis("x", 4), mk.axis("y", 3)
    lin = mk.bc(mk.op("Linear", "W", bias=False), [mk.weave(["*", x])], [mk.weave(["*", x])],
                [mk.rearr([0], [y])])
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(mk.doc(mk.block(lin, mk.tag("Layer")))))
    assert main(["validate", "--salvage", str(path)]) == 0
    assert "block tags with no body: none" in capsys.readouterr().out
    rc, out = _validate_json(capsys, str(path))
    assert out["salvage"] is None
