"""Every block of the bundled spec (salvaged) and of the older pyncd examples evaluates through
``ncdc eval`` at the tiny preset, in both quantisation modes where the sizes allow; the whole
salvaged prefix (ids -> Engram of layer 1) evaluates with every output finite."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ncdc import cli, interpreter
from ncdc.commands import eval as eval_cmd
from tests.conftest import ATTENTION_CORE, TRANSFORMER, loaded

BUNDLED = loaded()
OLDER = {"transformer": loaded(TRANSFORMER), "attention_core": loaded(ATTENTION_CORE)}
SITES = [("bundled", s.path) for s in BUNDLED.blocks()]
SITES += [(name, s.path) for name, spec in OLDER.items() for s in spec.blocks()]


def _spec(name):
    return BUNDLED if name == "bundled" else OLDER[name]


@pytest.mark.parametrize("quant", ["exact", pytest.param("emulate", marks=pytest.mark.slow)])
@pytest.mark.parametrize(("spec_name", "path"), SITES, ids=[f"{n}:{p}" for n, p in SITES])
def test_ncdc_eval_every_block(spec_name, path, quant, monkeypatch, capsys):
    spec = _spec(spec_name)
    monkeypatch.setattr(eval_cmd, "load_spec", lambda args: spec)
    rc = cli.main(["eval", "--block", path, "--quant", quant, "--stand-in", "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    report = json.loads(out)
    block = spec.block(path)
    assert [r["type"] for r in report["outputs"]] == [str(a) for a in block.cod]
    # (outputs need not be finite: a block such as log2 x is evaluated on normal inputs)


@pytest.mark.parametrize("quant", ["exact", "emulate"])
def test_salvaged_prefix_evaluates_finite(quant):
    b = BUNDLED.bind("tiny")
    pre = interpreter.prefix(BUNDLED.data)
    assert len(pre.content) == 4
    assert [type(m).__name__ for m in pre.content] == [
        "Rearrangement", "ProductOfMorphisms", "Block", "ProductOfMorphisms"]
    run = interpreter.interpret(pre, b.env, quant=quant, stand_in=True)
    assert sorted(run.stand_ins) == sorted([
        "Engram of Layer 1/Token Map/Token Map/E_{cmp}.table",
        "Engram of Layer 1/N-gram Hash/\\alpha_{1}/\\alpha_{1}.value"])
    ids = interpreter.random_inputs(pre, b.env, 0)
    res = run.evaluate(*ids)
    a, X = res.outputs
    assert a.values.shape == (12, 4) and X.values.shape == (12, 4, 64)
    assert all(np.isfinite(v.values).all() and v.live is None for v in res.outputs)
    assert np.array_equal(res.tape[next(iter(res.tape))].values, ids[0])   # the ids slot


def test_emulate_mode_rounds_the_residual_to_bf16():
    b = BUNDLED.bind("tiny")
    pre = interpreter.prefix(BUNDLED.data)
    ids = interpreter.random_inputs(pre, b.env, 1)
    ex = interpreter.interpret(pre, b.env, stand_in=True)(*ids)[1]
    em = interpreter.interpret(pre, b.env, stand_in=True, quant="emulate")(*ids)[1]
    from tests.oracles.common import bf16

    assert np.array_equal(em, bf16(em))           # Q(BF16)[x, n, m] holds bfloat16 values
    assert not np.array_equal(ex, bf16(ex))
    rel = np.abs(em - ex).max() / np.abs(ex).max()
    assert 1e-4 < rel < 0.2                        # rounding, not a different computation


@pytest.mark.slow
def test_cli_whole_model_and_outputs_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(eval_cmd, "load_spec", lambda args: BUNDLED)
    out = tmp_path / "o.npz"
    pfile = tmp_path / "p.safetensors"
    assert cli.main(["eval", "--stand-in", "--out", str(out), "--save-params", str(pfile),
                     "--rms"]) == 0
    text = capsys.readouterr().out
    assert "complete leading part" in text and "stand-in" in text and "time:" in text
    assert "Mixing Coefficients" in text                    # activation RMS per block
    saved = np.load(out)
    assert saved["out1"].shape == (12, 4, 64) and "tape/ids" in saved.files
    # the saved parameters reproduce the run (user data included)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, in0=saved["tape/ids"])
    out2 = tmp_path / "o2.npz"
    assert cli.main(["eval", "--params", str(pfile), "--inputs", str(inputs), "--out",
                     str(out2)]) == 0
    assert np.array_equal(np.load(out2)["out1"], saved["out1"])


def test_cli_errors_are_reported_not_raised(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(eval_cmd, "load_spec", lambda args: BUNDLED)
    assert cli.main(["eval", "--block", "Engram of Layer 1"]) == 1      # user data missing
    assert "E_{cmp}" in capsys.readouterr().err
    bad = tmp_path / "p.npz"
    np.savez(bad, **{"Mixing Coefficients/H_{0}.weight": np.zeros((2, 2))})
    assert cli.main(["eval", "--block", "Mixing Coefficients", "--params", str(bad)]) == 1
    assert "(4, 64, 4)" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(OLDER))
def test_older_generation_whole_models(name, monkeypatch, capsys):
    spec = OLDER[name]
    monkeypatch.setattr(eval_cmd, "load_spec", lambda args: spec)
    assert cli.main(["eval", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert all(r["finite"] for r in report["outputs"])
    assert report["block"] == "the whole model"


def _views_on_sparse_axes():
    from ncdc.ir import AffineSparseAxis, Broadcasted, View, walk

    out = []
    for site in walk(interpreter.prefix(BUNDLED.data)):
        b = site.node
        if isinstance(b, Broadcasted) and isinstance(b.operator, View) and any(
                isinstance(a, AffineSparseAxis) for a in b.cod[0].shape):
            out.append(b)
    return out


@pytest.mark.parametrize("view", _views_on_sparse_axes(), ids=lambda b: b.operator.label)
def test_derived_liveness_matches_the_affine_sparse_axis_forms(view):
    """docs/format.md §5.2: the stated form of every AffineSparseAxis a view produces is what the
    liveness of out-of-range reads gives (all-live input)."""
    from ncdc.ir import AffineSparseAxis

    env = BUNDLED.bind("tiny").env
    run = interpreter.interpret(view, env)
    (res,) = run.evaluate(*interpreter.random_inputs(view, env, 0)).outputs
    shape = res.values.shape
    live = np.ones(shape, bool) if res.live is None else res.live
    axes = list(view.cod[0].shape)
    grids = np.indices(shape)
    for pos, ax in enumerate(axes):
        if not isinstance(ax, AffineSparseAxis) or not all(g in axes for g in ax.guides):
            continue
        val = env.size(ax.stride) * grids[pos] + env.size(ax.shift)
        for g, s in zip(ax.guides, ax.guide_strides, strict=True):
            val = val + env.size(s) * grids[axes.index(g)]
        form = val >= 0
        if ax.extent is not None:
            form &= val < env.size(ax.extent)
        assert np.array_equal(live, live & form) and np.array_equal(form, form & live), ax
