"""Size symbols that share a label get readable qualified names (`k@L_{q}`), accepted by
--size and the API and used when printing expressions."""
from __future__ import annotations

import json

import pytest

import ncdc
from ncdc.cli import main
from tests.conftest import TRANSFORMER


def _by_name(spec):
    return {n: s for s, n in spec.size_names().items()}


def test_transformer_shared_labels_are_qualified(transformer):
    names = sorted(transformer.size_names().values())
    assert names == ["d_{ff}", "h", "k@L_{q}", "k@L_{v}", "m", "v@Aggregator", "v@Embedding",
                     "x"]
    syms = _by_name(transformer)
    # the qualifier says where the symbol is used: k@L_{q} sizes L_q's output, k@L_{v} L_v's
    mha = transformer.block("Multi-Head Attention")
    lq, _lk, lv = mha.body.content[0].content
    assert syms["k@L_{q}"] in lq.cod[0].shape[-1].size.free_symbols
    assert syms["k@L_{v}"] in lv.cod[0].shape[-1].size.free_symbols


def test_bundled_repository_only_namesake(bundled):
    v = sorted(n for n in bundled.size_names().values() if n.startswith("v@"))
    assert v == ["v@Embedding", "v@repository"]


def _elements(capsys, *sizes):
    argv = ["params", str(TRANSFORMER), "--preset", "tiny", "--json"]
    for s in sizes:
        argv += ["--size", s]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)["totals"]["learned"]["elements"]


def test_size_binds_one_of_two_namesakes(capsys, transformer):
    """Learned elements, by hand: per layer L_q, L_k (m·h·kq each), L_v (m·h·kv), L_o
    (h·kv·m), two feed-forward matrices (m·d_ff each); six layers; embedding and aggregator
    (m·v each)."""
    env = transformer.bind("tiny").env
    val = {n: env.size(s) for s, n in transformer.size_names().items()}
    m, h, dff = val["m"], val["h"], val["d_{ff}"]
    v = val["v@Embedding"]

    def total(kq, kv):
        return 6 * (2 * m * h * kq + 2 * m * h * kv + 2 * m * dff) + 2 * m * v

    assert _elements(capsys) == total(val["k@L_{q}"], val["k@L_{v}"])
    assert _elements(capsys, "k@L_v=3") == total(val["k@L_{q}"], 3)
    assert _elements(capsys, "k@L_{q}=5", "k@L_{v}=3") == total(5, 3)
    assert _elements(capsys, "k=7") == total(7, 7)          # the label binds both


def test_totals_print_qualified_not_as_equal_looking_terms(capsys):
    assert main(["params", str(TRANSFORMER)]) == 0
    out, err = capsys.readouterr()
    total = next(line for line in out.splitlines() if line.startswith("total learned"))
    assert "k@L_{q}" in total and "k@L_{v}" in total
    assert "12*h*k*m + 12*h*k*m" not in total
    assert "id:" not in out + err
    assert "--size k@L_{q}=N" in err and "--size k@L_{v}=N" in err   # the note on unbound sizes


def test_unknown_size_suggests_qualified_names(transformer):
    with pytest.raises(ncdc.BindingError) as e:
        transformer.bind("tiny", sizes={"k@L_x": 3})
    assert "did you mean" in str(e.value) and "k@L_{v}" in str(e.value)


def test_api_binding_by_qualified_name(transformer):
    b = transformer.bind("tiny", sizes={"k@L_{v}": 3})
    syms = _by_name(transformer)
    assert b.env.size(syms["k@L_{v}"]) == 3 and b.env.size(syms["k@L_{q}"]) == 4
    run = ncdc.interpret(transformer.block("Attention Core"), sizes={"k@L_v": 3})
    assert run.dom_shapes() == [(4, 4, 4), (4, 4, 4), (4, 4, 3)]
