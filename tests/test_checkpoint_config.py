"""``--config``: a Hugging Face DeepSeek-V4 config.json bound as the spec's sizes and
constants, every field that disagrees with the diagram or the command line refused at once."""
from __future__ import annotations

import json

import pytest

from ncdc.checkpoint.errors import MapError
from ncdc.checkpoint.hfconfig import ConfigError, config_values, with_config
from ncdc.cli import main

TINY = {"vocab_size": 100, "hidden_size": 64, "hc_mult": 4, "num_attention_heads": 4,
        "head_dim": 64, "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 32,
        "sliding_window": 4, "n_routed_experts": 8, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "qk_rope_head_dim": 16, "rms_norm_eps": 1e-6,
        "hc_eps": 1e-6, "swiglu_limit": 10.0, "scoring_func": "sqrtsoftplus",
        "routed_scaling_factor": 1.5, "num_key_value_heads": 1, "hc_sinkhorn_iters": 20,
        "layer_types": ["sliding_attention"], "mlp_layer_types": ["moe"],
        "rope_parameters": {"main": {"rope_theta": 10000.0}}}


def _write(tmp_path, doc):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(doc))
    return p


def test_sizes_and_constants_come_from_the_config(bundled, tmp_path):
    sizes, consts = with_config(bundled, _write(tmp_path, TINY), "tiny", {}, {})
    assert sizes["m"] == 64 and sizes["w"] == 4 and sizes["f"] == 32
    assert sizes["j"] == 2 and sizes["t"] == 8            # 4 heads / 2 groups; 16 / 2
    assert consts[r"\varepsilon"] == 1e-6 and consts[r"\beta_0"] == 10000.0
    binding = bundled.bind("tiny", sizes, consts)
    eps = [s for s in bundled.doc.symbols.values() if s.label == r"\varepsilon"]
    assert eps and float(binding.env.values[eps[0]]) == 1e-6   # the constants file has 1e-20


def test_rope_pairs_from_the_partial_rotary_factor():
    doc = dict(TINY, partial_rotary_factor=0.25)
    del doc["qk_rope_head_dim"]
    sizes, _, problems = config_values(doc)
    assert sizes["t"] == (8, "qk_rope_head_dim / 2") and not problems


def test_every_disagreeing_field_is_listed_at_once(bundled, tmp_path):
    doc = dict(TINY, num_key_value_heads=2, scoring_func="softmax", routed_scaling_factor=2.5,
               layer_types=["compressed_sparse_attention"])
    with pytest.raises(ConfigError) as err:
        with_config(bundled, _write(tmp_path, doc), "tiny", {"w": 8}, {})
    msg = str(err.value)
    assert "5 field(s) disagree" in msg
    for needle in ("num_key_value_heads = 2, but the diagram has 1",
                   "scoring_func = 'softmax', but the diagram has 'sqrtsoftplus'",
                   "routed_scaling_factor = 2.5", "layer_types[0] = 'compressed_sparse_attention'",
                   "sliding_window = 4, but --size w=8"):
        assert needle in msg


def test_under_the_released_preset_the_stated_sizes_win(bundled, tmp_path):
    with pytest.raises(ConfigError, match="hidden_size = 64, but the diagram states m = 5120"):
        with_config(bundled, _write(tmp_path, TINY), "released", {}, {})


def test_heads_must_split_into_the_output_groups():
    _, _, problems = config_values(dict(TINY, num_attention_heads=5))
    assert any("not a multiple of o_groups" in p for p in problems)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_an_unreadable_config_is_a_usage_error(bundled, tmp_path, text):
    p = tmp_path / "config.json"
    p.write_text(text)
    with pytest.raises(MapError):
        with_config(bundled, p, "tiny", {}, {})


def test_the_cli_reports_a_disagreement_in_one_line(tmp_path, capsys):
    cfg = _write(tmp_path, dict(TINY, hc_sinkhorn_iters=7))
    rc = main(["eval", "--block", "Expert Gate", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "hc_sinkhorn_iters = 7, but the diagram has 20" in err and "Traceback" not in err


# ------------------------------------------------------------------ released constants


def _by_label(bundled, binding, label):
    sym = next(s for s in bundled.doc.symbols.values() if s.label == label)
    return float(binding.env.values[sym]), binding.sources[sym]


def test_the_released_preset_carries_the_released_constants_with_their_source(bundled):
    b = bundled.bind("released", {"b": 6})
    for label, value, source in ((r"\varepsilon", 1e-6, "rms_norm_eps"),
                                 (r"\varepsilon_{hc}", 1e-6, "hc_eps"),
                                 (r"\lambda", 10.0, "swiglu_limit"),
                                 (r"\beta_{0}", 10000.0, "rope_theta")):
        got, origin = _by_label(bundled, b, label)
        assert got == value and "released preset" in origin and source in origin
    assert _by_label(bundled, bundled.bind("tiny"), r"\varepsilon")[0] == 1e-20


def test_validate_warns_once_about_constants_no_preset_binds(bundled, tmp_path):
    warned = [d for d in bundled.validate(bundled.bind("tiny"))
              if d.code == "constants-defaulted"]
    assert len(warned) == 1 and warned[0].severity == "warning"
    assert r"\varepsilon = 1e-20" in warned[0].message
    assert not [d for d in bundled.validate(bundled.bind("released", {"b": 6}))
                if d.code == "constants-defaulted"]
    sizes, consts = with_config(bundled, _write(tmp_path, TINY), "tiny", {}, {})
    rest = [d for d in bundled.validate(bundled.bind("tiny", sizes, consts))
            if d.code == "constants-defaulted"]
    assert len(rest) == 1 and r"\varepsilon =" not in rest[0].message   # the config bound it
    assert r"\tau = 1" in rest[0].message                                # HF has no tau field


@pytest.mark.parametrize("field, value", [
    ("hidden_size", 1e300), ("hidden_size", True), ("hidden_size", -3), ("hidden_size", "64"),
    ("partial_rotary_factor", float("inf")), ("o_groups", 0), ("rms_norm_eps", float("nan")),
    ("rope_parameters", [1, 2]), ("layer_types", "sliding_attention"),
])
def test_odd_field_values_are_skipped_or_refused_typed(bundled, tmp_path, field, value):
    doc = dict(TINY, **{field: value})
    if field == "partial_rotary_factor":
        del doc["qk_rope_head_dim"]
    sizes, consts = with_config(bundled, _write(tmp_path, doc), "tiny", {}, {})
    if field == "hidden_size":
        assert "m" not in sizes
    assert all(isinstance(v, (int, float)) for v in list(sizes.values()) + list(consts.values()))
