"""The bundled (truncated) DeepSeek spec: strict failure, salvage, validation, key shapes,
presets."""
from __future__ import annotations

import json
import re

import pytest
import sympy

import ncdc
from ncdc import ir
from ncdc.ir import operators as ops
from ncdc.ir.errors import SpecFormatError
from ncdc.spec.checks_sites import all_sites
from ncdc.spec.summary import block_titles, repository_only_titles, salvage_summary
from ncdc.spec.validate import counts_by_code

CUT_OFFSET = 1_889_720


def test_strict_load_names_the_cut():
    with pytest.raises(SpecFormatError) as info:
        ncdc.load(ncdc.bundled_spec_path(), salvage=False)
    err = info.value
    assert (err.offset, err.line, err.column) == (CUT_OFFSET, 1, CUT_OFFSET + 1)
    assert err.json_path.startswith("data.content[4].body.content[0].body.content[1]")
    text = str(err)
    assert "offset 1889720" in text and "line 1" in text and "column 1889721" in text
    assert text.count(err.json_path) == 1          # the path is said once
    assert "--salvage" in text


EXPECTED_BLOCKS = ["Model Inputs", "Embedding", "Sliding Window Layer", "Single-Pass mHC",
                   "Mixing Coefficients", "Sliding Window Attention", "Attention Core",
                   "Mixture of Experts", "Expert Gate", "Routed Experts", "Shared Expert",
                   "Engram of Layer 1", "N-gram Hash", "N-gram Table", "Engram Gate"]


def test_salvage_recovers_the_expected_blocks(bundled):
    titles = [s.node.title for s in bundled.blocks()]
    for t in EXPECTED_BLOCKS:
        assert t in titles, t
    assert titles.count("Single-Pass mHC") == 2
    assert titles.count("Sinkhorn Round") == 2
    assert len(titles) == 117
    assert bundled.doc.salvage.cut_offset == CUT_OFFSET
    assert bundled.block("Sinkhorn Round").tag.repetition == 19


def test_salvaged_spec_validates_without_errors(bundled):
    diags = bundled.validate()
    by_code = counts_by_code(diags)
    assert not [d for d in diags if d.severity == "error"]
    # docs/format.md §2.5: five BlockOperator ports and seven TypeConverts, nothing else.
    lenient = [d for d in diags if d.code == "datatype-leniency"]
    ports = [d for d in lenient if ".operator." not in d.json_path]
    converts = [d for d in lenient if d.json_path.endswith(".operator.source")]
    assert (len(ports), len(converts), len(lenient)) == (5, 7, 12)
    boxes = sorted(re.search(r"\('([^']+)'\)", d.message).group(1) for d in ports)
    assert boxes == ["Mixing Coefficients", "Mixture of Experts", "Mixture of Experts",
                     "Sliding Window Attention", "Sliding Window Attention"]
    # one truncated diagnostic per cut term; the three cut blocks are warnings
    cut = [d for d in diags if d.code == "truncated"]
    assert len(cut) == len(bundled.truncated) == 13
    assert [d.json_path for d in cut if d.severity == "warning"] == [
        "data.content[4]", "data.content[4].body.content[0]",
        "data.content[4].body.content[0].body.content[1].content[2].operator.block"]
    assert set(by_code) == {"warning:datatype-leniency", "warning:truncated", "info:truncated"}


def test_validation_with_released_sizes(bundled):
    diags = bundled.validate(bundled.bind("released", {"b": 6}))
    assert not [d for d in diags if d.severity == "error"]
    assert not [d for d in diags if d.code == "stride-out-of-range"]
    unbound = sorted(d.axes[0] for d in diags if d.code == "unbound-symbol")
    assert unbound == ["P", "l"]        # only the truncated remainder uses them
    assert all(d.severity == "info" for d in diags if d.code == "unbound-symbol")
    without_b = bundled.validate(bundled.bind("released"))
    (b,) = [d for d in without_b if d.code == "unbound-symbol" and d.axes == ("b",)]
    assert b.severity == "warning" and "the size of axis x" in b.message
    assert "--size b=N" in b.message


def test_salvage_summary(bundled):
    s = salvage_summary(bundled.doc)
    assert len(s.complete) == 117
    assert s.stages == ["Embedding, Model Inputs", "Sliding Window Layer", "Engram of Layer 1"]
    assert [(c.path, c.inferred_title, c.inferred_tag) for c in s.cut] == [
        ("data.content[4]", "Sliding Window Layer", 801975698),
        ("data.content[4].body.content[0]", "Single-Pass mHC", None),
        ("data.content[4].body.content[0].body.content[1].content[2].operator.block",
         "Mixing Coefficients", 308478123)]
    assert all(c.tag_lost for c in s.cut)
    line = s.one_line()
    assert line.startswith("salvaged 117 complete blocks: Embedding, Model Inputs → "
                           "Sliding Window Layer → Engram of Layer 1; cut inside "
                           "Sliding Window Layer #2")
    assert json.loads(json.dumps(s.as_dict()))["cut_offset"] == CUT_OFFSET


FORMAT_REPOSITORY_ONLY = {
    r"(\lvert d \rvert \lvert i \rvert)^{-1/2} x", r"\alpha_{14}", r"\max(x, 2^{-126})",
    r"\max(x, 2^{-9})", "Candidate Pool", "Cast from E2M1", "Cast to E2M1", "Compressor",
    "Concatenation", "Encoder Group", "Engram of Layer 14", "Entry Gather",
    "FP4 Round Trip in the Indexer", "FP4 Round Trip of an Entry", "Full Attention",
    "Indexer Scores", "IndexSelect", "Lightning Indexer", "Output Probabilities",
    "Pinned Newest Block", "Positive Infinity", "Reindex Attention", "Reindex Group",
    "Reuse Attention", "Reuse Layer", "Rotary Embedding of the Decoder Entries",
    "Rotary Embedding of the Decoder Indexer Keys", "Rotary Embedding of the Encoder Entries",
    "Rotary Embedding of the Encoder Indexer Keys", "Rotary Embedding of the Indexer Queries",
    "Third Encoder Group", r"\ulcorner x \lrcorner_{-6}^{6}", "back", "blk", "cand",
    r"p_{14}", "pin", "pos", "x / 6"}


def test_repository_only_titles_match_format_section_15(bundled):
    only = repository_only_titles(bundled.doc)
    assert len(only) == 39
    assert {e.title for e in only} == FORMAT_REPOSITORY_ONLY
    rows = {e.title: e for e in block_titles(bundled.doc)}
    assert len(rows) == 99 and sum(e.has_body for e in rows.values()) == 60
    # [referenced, unreferenced] tag records per title, as docs/format.md §15 lists them
    for title, counts in {"Cast": (36, 328), "Sliding Window Layer": (1, 1),
                          "Single-Pass mHC": (2, 18), "Mixing Coefficients": (1, 0),
                          "win": (1, 9), "qgrp": (2, 38), "Entry Gather": (0, 8)}.items():
        assert (rows[title].tags_referenced, rows[title].tags_unreferenced) == counts, title
    assert sum(e.tags_referenced + e.tags_unreferenced for e in rows.values()) == 1168


# --------------------------------------------------------------------------- key wires


@pytest.fixture(scope="module")
def released6(bundled):
    return bundled.bind("released", {"b": 6}).env


def _labels(arr):
    return tuple(a.label for a in arr.shape)


def test_residual_state_shapes(bundled, released6):
    stage = bundled.data.partial["content"][1]          # model inputs -> (a0, X0)
    a0, x0 = stage.cod
    assert _labels(a0) == ("x", "n") and released6.sizes(a0.shape) == (12, 4)
    assert _labels(x0) == ("x", "n", "m") and released6.sizes(x0.shape) == (12, 4, 5120)
    layer0 = bundled.data.partial["content"][2]
    assert layer0.title == "Sliding Window Layer"
    a1, x1 = layer0.cod
    assert released6.sizes(a1.shape) == (12, 4)
    assert released6.sizes(x1.shape) == (12, 4, 5120) and str(x1.datatype) == "Q(BF16)"


def test_window_shape(bundled, released6):
    swa = bundled.block("Sliding Window Attention")
    wins = [s.node for s in all_sites(swa) if isinstance(s.node, ir.Broadcasted)
            and isinstance(s.node.operator, ops.View) and s.node.operator.label == "win"]
    assert len(wins) == 1
    (kv,) = wins[0].cod
    assert _labels(kv) == ("x", "w|x", "c")
    assert isinstance(kv.shape[1], ir.AffineSparseAxis)
    assert released6.sizes(kv.shape) == (12, 128, 512)


# FreeNumeric ids of docs/format.md §4.4
M, T1, E, K, W, C, E_TILDE, Y_HAT, H, G, J, T, BAR_P, B = (
    2073802315, 336459836, 1621082764, 1323411805, 990851622, 296734870, 559632892, 903385593,
    2130048138, 1338770949, 141018594, 1181195560, 1390890971, 662338339)


def test_released_defaults_come_from_name_exponents(bundled, released6):
    sym = bundled.doc.symbols
    got = {i: released6.size(sym[i]) for i in (M, T1, E, K, W, C)}
    assert got == {M: 5120, T1: 384006168, E: 384, K: 6, W: 128, C: 512}
    assert released6.size(sym[B]) == 6
    assert B not in {s.uid for s in bundled.bind("released").env.values}


def test_tiny_preset_is_consistent(bundled):
    env = bundled.bind("tiny").env
    sym = bundled.doc.symbols

    def v(uid):
        return env.size(sym[uid])

    assert v(C) == v(E_TILDE) * v(Y_HAT)                 # |c| = |Ẽ|·|ŷ|
    assert v(H) == v(G) * v(J)                           # |h| = |g|·|j|
    assert 2 * v(T) <= v(C) and v(K) <= v(E)
    primes = [sympy.nextprime(100)]
    while len(primes) < 24:
        primes.append(sympy.nextprime(primes[-1]))
    assert primes[0] == 101 and v(T1) == sum(primes)     # T_1 = the 24 primes after 100
    assert all(q < v(BAR_P) for q in primes)
    assert bundled.bind("tiny").unbound == []
    diags = bundled.validate(bundled.bind("tiny"))
    assert not [d for d in diags if d.severity == "error" or d.code == "stride-out-of-range"]


def test_inconsistent_sizes_are_caught_by_stride_rows(bundled):
    """With |c| < |Ẽ|·|ŷ| the qgrp view reads past c: a stride-out-of-range warning there."""
    diags = bundled.validate(bundled.bind("tiny", {"c": 48}))
    out = [d for d in diags if d.code == "stride-out-of-range"]
    assert out and all("c" in d.axes for d in out)
    assert any("qgrp" in d.titles for d in out)
    assert all(d.severity == "warning" for d in out)
