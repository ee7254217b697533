"""`--block` accepts every name the tool prints, suggests close matches for typos and lists
ambiguous names as a table."""
from __future__ import annotations

import re

import pytest

import ncdc
from ncdc.cli import main
from ncdc.naming import BlockLookupError, find, named_blocks
from tests.conftest import TRANSFORMER


@pytest.mark.slow
def test_every_label_and_json_path_names_its_own_block(bundled, transformer):
    for spec in (bundled, transformer):
        named = named_blocks(spec.data)
        labels = [b.label for b in named]
        assert len(set(labels)) == len(labels)              # unique per site
        for b in named:
            assert find(spec.data, b.label).node is b.site.node
            assert find(spec.data, b.key_path).node is b.site.node
            assert find(spec.data, b.path).node is b.site.node


def test_transformer_labels_mark_repeated_siblings(transformer):
    labels = [b.label for b in named_blocks(transformer.data)]
    assert labels == [
        "Embedding", "Transformer Layer", r"Transformer Layer / Add \& Norm",
        r"Transformer Layer / Add \& Norm / Multi-Head Attention",
        r"Transformer Layer / Add \& Norm / Multi-Head Attention / Attention Core",
        r"Transformer Layer / Add \& Norm~1", r"Transformer Layer / Add \& Norm~1 / Feed Forward",
        "Aggregator"]


def test_the_two_mhc_sublayers(bundled):
    first = bundled.site("Sliding Window Layer / Single-Pass mHC")
    second = bundled.site("Sliding Window Layer / Single-Pass mHC~1")
    assert first.path == "data.content[2].body.content[0]"
    assert second.path == "data.content[2].body.content[1]"
    assert bundled.site("Single-Pass mHC~1").path == second.path            # trailing part
    assert bundled.site("Sliding Window Layer/Single-Pass mHC~1").path == second.path  # key
    assert bundled.site("sliding window layer / single-pass MHC~1").path == second.path


def test_parameter_key_paths_name_their_block(bundled, transformer):
    """The block part of every parameter key (iteration marks included) names the block the
    parameter lives in."""
    for spec in (bundled, transformer):
        for p in spec.params(binding=spec.bind("tiny")):
            block_path = p.key.rsplit("/", 1)[0]
            if "/" not in p.key:
                continue
            site = spec.site(block_path)
            assert p.json_path.startswith(site.path), (p.key, site.path)
            key_blocks = re.sub(r"@\d+(?=/|$)", "", block_path).replace(" / ", "/")
            assert spec.label(site).replace(" / ", "/") == key_blocks


def test_titles_plain_latex_and_escapes(bundled, transformer):
    mc = bundled.block("Mixing Coefficients")
    assert bundled.block(r"\text{Mixing Coefficients}") is mc
    assert bundled.block("mixing  coefficients") is mc
    assert transformer.block("Add & Norm~1 / Feed Forward") is transformer.block("Feed Forward")


def test_ambiguous_title_lists_a_table_of_labels_and_paths(bundled, capsys):
    with pytest.raises(BlockLookupError) as e:
        bundled.block("Cast")
    cands = e.value.candidates
    assert len(cands) > 10 and len({label for label, _ in cands}) == len(cands)
    for label, path in cands:
        assert bundled.site(label).path == path          # each candidate is a usable name
    rc = main(["show", "--block", "Cast"])
    err = capsys.readouterr().err
    assert rc == 1
    rows = [line for line in err.splitlines() if line.startswith("  ")]
    assert re.match(r"\s+BLOCK\s+JSON PATH", rows[0])
    assert len(rows) == len(cands) + 1                    # one candidate per line
    assert all(line.rstrip().endswith(path) for line, (_, path) in zip(rows[1:], cands, strict=True))


def test_typo_gets_close_matches_and_nonsense_gets_none(bundled):
    with pytest.raises(BlockLookupError) as e:
        bundled.block("Sliding Windw Layer")
    assert e.value.candidates[0] == ("Sliding Window Layer", "data.content[2]")
    assert "did you mean" in str(e.value)
    with pytest.raises(BlockLookupError) as e:
        bundled.block("X")
    assert e.value.candidates == [] and "did you mean" not in str(e.value)


def test_cli_accepts_check_labels(capsys):
    rc = main(["show", str(TRANSFORMER), "--block", r"Transformer Layer / Add \& Norm~1"])
    out = capsys.readouterr().out
    assert rc == 0 and out.splitlines()[0].startswith("Add & Norm") and "Feed Forward" in out
    assert "Multi-Head Attention" not in out


def test_errors_are_spec_errors():
    assert issubclass(ncdc.BlockLookupError, ncdc.SpecError)


def test_a_field_path_names_its_enclosing_morphism(bundled):
    """Validation reports field paths (`..._cod_stride_shift[0]`); naming one points to the
    morphism that holds the field."""
    with pytest.raises(BlockLookupError) as e:
        bundled.block("data.content[2].body.content[0]._cod_stride_shift[0]")
    assert e.value.candidates == [("Sliding Window Layer / Single-Pass mHC",
                                   "data.content[2].body.content[0]")]


@pytest.mark.parametrize("command", ["blocks", "show"])
def test_tables_print_escaped_characters_plainly(command, capsys):
    """``Add \\& Norm`` is printed ``Add & Norm`` by the text tables (JSON keeps the title)."""
    assert main([command, str(TRANSFORMER)]) == 0
    out = capsys.readouterr().out
    assert "Add & Norm" in out
    assert "\\&" not in out
