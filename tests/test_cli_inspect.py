"""The inspection commands: validate, show, blocks, params, graph (through ``ncdc.cli.main``)."""
from __future__ import annotations

import json

import networkx as nx
import pytest

import ncdc
from ncdc.cli import main
from tests.conftest import DATA, TRANSFORMER


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# --------------------------------------------------------------------------- validate


def test_validate_bundled_default(capsys):
    rc, out, _ = run(capsys, "validate")
    assert rc == 0
    assert out.count("warning: datatype-leniency") == 12
    assert "valid: 0 error(s), 15 warning(s), 10 info" in out
    assert "salvaged 117 complete blocks: Embedding, Model Inputs → Sliding Window Layer → " \
           "Engram of Layer 1; cut inside Sliding Window Layer #2" in out
    assert "cut at offset 1889720 (line 1, column 1889721)" in out
    assert "only tags in the repository (39)" in out and "Candidate Pool" in out
    assert "tag #801975698" in out and "tag #308478123" in out


def test_validate_strict_truncated_file_is_unreadable(capsys):
    rc, out, err = run(capsys, "validate", ncdc.bundled_spec_path())
    assert rc == 2 and out == ""
    assert "offset 1889720" in err and "data.content[4]" in err


def test_validate_salvage_flag(capsys):
    rc, out, _ = run(capsys, "validate", ncdc.bundled_spec_path(), "--salvage")
    assert rc == 0 and "salvaged 117 complete blocks" in out


def test_validate_json(capsys):
    rc, out, err = run(capsys, "validate", "--json")
    doc = json.loads(out)
    assert rc == 0 and err == ""
    assert doc["valid"] is True and doc["counts"] == {"error": 0, "warning": 15, "info": 10}
    assert doc["by_code"]["warning:datatype-leniency"] == 12
    assert doc["salvage"]["cut_offset"] == 1889720
    assert len(doc["salvage"]["repository_only_titles"]) == 39
    assert [c["inferred_title"] for c in doc["salvage"]["cut_blocks"]] == [
        "Sliding Window Layer", "Single-Pass mHC", "Mixing Coefficients"]


def test_validate_invalid_spec(capsys):
    rc, out, _ = run(capsys, "validate", str(DATA / "many_errors.json"))
    assert rc == 1
    assert "error: compose-mismatch" in out and "INVALID: 5 error(s), 1 warning(s)" in out
    rc, out, _ = run(capsys, "validate", str(DATA / "many_errors.json"), "--json")
    assert rc == 1 and json.loads(out)["counts"]["error"] == 5


def test_validate_undecodable_and_unreadable(capsys, tmp_path, attention_core_json):
    del attention_core_json["data"]["body"]["content"][1]["operator"]["signature"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(attention_core_json))
    rc, out, _ = run(capsys, "validate", str(bad))
    assert rc == 1 and "error: decode: Einops lacks field 'signature'" in out
    rc, out, _ = run(capsys, "validate", str(bad), "--json")
    assert rc == 1 and json.loads(out)["diagnostics"][0]["json_path"] == \
        "data.body.content[1].operator"
    rc, _, err = run(capsys, "validate", str(tmp_path / "missing.json"))
    assert rc == 2 and "cannot read" in err
    (tmp_path / "notjson.json").write_text("[1, 2")
    rc, out, _ = run(capsys, "validate", str(tmp_path / "notjson.json"), "--json")
    assert rc == 2 and json.loads(out)["readable"] is False


def test_validate_with_sizes(capsys):
    rc, out, _ = run(capsys, "validate", str(TRANSFORMER), "--preset", "released")
    assert rc == 0 and out.count("warning: unbound-symbol") == 8
    # two symbols are labelled k; the hint names id 1252803392 by its qualified name
    assert "k (id 1252803392) has no value" in out and "--size k@L_{v}=N" in out
    rc, out, _ = run(capsys, "validate", str(TRANSFORMER), "--preset", "tiny")
    assert rc == 0 and "valid: 0 error(s), 0 warning(s)" in out
    rc, _, err = run(capsys, "validate", str(TRANSFORMER), "--size", "nosuch=3")
    assert rc == 2 and "no symbol of this spec is named 'nosuch'" in err


# --------------------------------------------------------------------------- show


def test_show_tree(capsys):
    rc, out, err = run(capsys, "show")
    assert rc == 0
    assert "note: bundled spec is truncated at offset 1889720; salvaged 117 complete blocks" \
        in err
    lines = out.splitlines()
    assert lines[0] == "Embedding  (Q(INT64,Nat<v>)[x]) → (Q(BF16)[x, m])"
    assert "      Sinkhorn Round ×19  (Q(FP32)[n, n]) → (Q(FP32)[n, n])" in lines
    assert "      Attention Core  (Q(FP32)[], Q(BF16)[x, c], Q(BF16)[x, w|x, c]) → " \
           "(Q(BF16)[x, c])" in lines
    assert lines[-1].startswith("    Mixing Coefficients?  [cut off by truncation")
    assert not any("Cast" in line for line in lines)           # annotations hidden


def test_show_released_without_b_says_so(capsys):
    rc, out, err = run(capsys, "show", "--preset", "released", "--depth", "1")
    assert rc == 0
    assert "gives no value to b" in err and "--size b=N" in err
    assert "Sliding Window Layer  (Q(FP32)[2*b, 4], R[2*b, 4, 5120])" in out


def test_show_bound_block(capsys):
    rc, out, err = run(capsys, "show", "--preset", "released", "--size", "b=6", "--block",
                       "Sliding Window Attention", "--depth", "2")
    assert rc == 0 and "gives no value" not in err
    assert out.splitlines()[0] == "Sliding Window Attention  (Q(BF16)[12, 5120]) → " \
                                  "(Q(BF16)[12, 5120])"
    assert "  Attention Core  (Q(FP32)[], Q(BF16)[12, 512], Q(BF16)[12, 128, 512]) → " \
           "(Q(BF16)[12, 512])" in out


def test_show_all_and_json(capsys):
    rc, out, _ = run(capsys, "show", str(TRANSFORMER), "--all", "--json")
    rows = json.loads(out)["blocks"]
    assert [r["title"] for r in rows][:3] == ["Embedding", "Transformer Layer", r"Add \& Norm"]
    assert rows[1]["repetition"] == 6
    assert rows[1]["dom"] == [{"datatype": "R", "axes": ["x", "m"], "shape": ["x", "m"]}]
    rc, out, _ = run(capsys, "show", "--all", "--depth", "1")
    assert rc == 0 and "A^{0}  () → (Q(FP32)[x, n])" in out


def test_show_unknown_block(capsys):
    rc, _, err = run(capsys, "show", "--block", "Sinkhorn")
    assert rc == 1 and "did you mean" in err and "First Sinkhorn Round" in err


# --------------------------------------------------------------------------- blocks


def test_blocks(capsys):
    rc, out, _ = run(capsys, "blocks")
    assert rc == 0
    assert out.splitlines()[-1] == "99 titles: 60 with a body in the data, 39 only in the " \
                                   "repository"
    rows = {line.split("  ")[0].strip(): line.split() for line in out.splitlines()[1:-1]}
    assert rows["Cast"][-3:] == ["yes", "36", "36/328"]
    assert rows["Candidate Pool"][-3:] == ["no", "0", "0/1"]
    rc, out, _ = run(capsys, "blocks", "--json")
    titles = json.loads(out)["titles"]
    mc = next(t for t in titles if t["title"] == "Mixing Coefficients")
    assert mc["occurrences"] == 2 and mc["tags_referenced"] == 1


# --------------------------------------------------------------------------- params


def test_params_of_mixing_coefficients(capsys):
    rc, out, err = run(capsys, "params", "--block", "Mixing Coefficients")
    assert rc == 0 and "gives no value" not in err
    lines = out.splitlines()
    assert lines[1].split() == ["Mixing", "Coefficients/H_{0}.weight", "[n=4,", "m=5120,",
                                "n=4]", "81,920", "learned"]
    # H_0, H_1: W[n, m, n] + b[n]; H_2: W[n, m, n, n] + b[n, n]  (n = 4, m = 5120)
    expected = 2 * (4 * 5120 * 4 + 4) + (4 * 5120 * 16 + 16)
    assert f"total learned: 6 arrays, {expected:,} elements" in out


def test_params_json_totals(capsys):
    rc, out, _ = run(capsys, "params", "--json", "--preset", "tiny", "--block",
                     "Engram of Layer 1")
    doc = json.loads(out)
    assert rc == 0
    fixed = {p["key"].split("/")[-1]: p for p in doc["params"] if p["kind"] == "fixed"}
    assert fixed["p_{1}.value"]["elements"] == 24          # G·K = 3·8
    assert doc["totals"]["fixed"] == {"arrays": 3, "elements": 24 + 4 + 100}


# --------------------------------------------------------------------------- graph


def test_graph_dot_and_graphml(capsys, tmp_path):
    dot = tmp_path / "core.dot"
    rc, out, _ = run(capsys, "graph", "--block", "Attention Core", "-o", str(dot))
    assert rc == 0 and out.startswith(f"wrote {dot}: ")
    text = dot.read_text()
    assert text.startswith('digraph "Attention Core" {') and text.rstrip().endswith("}")
    assert '[label="Q(BF16)[x, w|x, c]"]' in text and "->" in text
    gml = tmp_path / "all.graphml"
    rc, out, _ = run(capsys, "graph", "-o", str(gml), "--preset", "released", "--size", "b=6")
    g = nx.read_graphml(gml)
    kinds = {a["kind"] for _, a in g.nodes(data=True)}
    assert {"input", "box", "tape", "truncated"} <= kinds
    assert "output" not in kinds                    # the cut model's results are lost
    shapes = {a["shape"] for *_, a in g.edges(data=True)}
    assert "Q(BF16)[12, 4, 5120]" in shapes and "Q(FP32)[12, 4]" in shapes
    rc, _, err = run(capsys, "graph", "-o", str(tmp_path / "x.png"))
    assert rc == 2 and ".dot or .graphml" in err


def test_graph_wiring_of_attention_core(attention_core):
    from ncdc.ir.graph import wiring_graph

    g = wiring_graph(attention_core.data)
    assert sorted(n for n, a in g.nodes(data=True) if a["kind"] == "input") == [
        "in:0", "in:1", "in:2"]
    # the second Einops reads the softmax chain and the value input (in:2, via the product)
    last = "data.body.content[1]"
    preds = sorted(u for u, _ in g.in_edges(last))
    assert preds == ["data.body.content[0].content[0].content[2]", "in:2"]
    assert list(g.successors(last)) == ["out:0"]
    assert not [e for e in g.edges(data=True) if "mismatch" in e[2]]


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["validate"], ["show", "--all"], ["blocks"], ["params"]])
def test_output_is_deterministic(capsys, argv):
    first = run(capsys, *argv)
    assert run(capsys, *argv) == first
