"""``ncdc run``: the generated module built on the meta device, filled from a weights file (or
seeded synthetic weights), run once; outputs checked against the reference interpreter given
the same weights and inputs."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ncdc.cli import main
from tests.conftest import TRANSFORMER

T = str(TRANSFORMER)


def cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """A whole-model weights file of the transformer example (written by ``ncdc eval``)."""
    d = tmp_path_factory.mktemp("run")
    path = d / "model.safetensors"
    assert main(["eval", T, "--save-params", str(path), "--seed", "3"]) == 0
    return path


def _interp(tmp_path, block, params, inputs, capsys):
    out = tmp_path / "interp.npz"
    rc, _, err = cli(capsys, "eval", T, "--block", block, "--params", str(params), "--inputs",
                     str(inputs), "--out", str(out))
    assert rc == 0, err
    return np.load(out)


def _inputs(tmp_path, shape, seed=1):
    path = tmp_path / "in.npz"
    np.savez(path, in0=np.random.default_rng(seed).normal(size=shape))
    return path


def test_run_matches_the_interpreter_on_a_whole_model_file(tmp_path, capsys, whole):
    """A block loaded from a whole-model file (its keys under 'Transformer Layer@0/...')
    computes what the interpreter computes from the same file in float64."""
    block = "Feed Forward"
    # the interpreter reads the block's own keys: a file of them, cut from the whole one
    from ncdc.interpreter.weights import load_params, save_params

    every = load_params(whole)
    pre = "Transformer Layer@0/Add \\& Norm~1/"
    own = {k.removeprefix(pre): v for k, v in every.items() if k.startswith(pre + block)}
    assert len(own) == 2
    own_path = tmp_path / "ff.npz"
    save_params(own, own_path)
    inputs = _inputs(tmp_path, (4, 4))
    ref = _interp(tmp_path, block, own_path, inputs, capsys)
    out = tmp_path / "run.npz"
    rc, text, err = cli(capsys, "run", T, "--block", block, "--params", str(whole), "--inputs",
                        str(inputs), "--out", str(out), "--dtype", "float64")
    assert rc == 0, err
    assert "keys under 'Transformer Layer@0/Add \\& Norm~1/Feed Forward/'" in text
    got = np.load(out)
    np.testing.assert_allclose(got["out0"], ref["out0"], rtol=1e-12, atol=1e-12)
    assert np.abs(ref["out0"]).max() > 0.1                 # not a trivially zero output


def test_key_prefix_picks_an_iteration(tmp_path, capsys, whole):
    """Feed Forward occurs in six iterations; --key-prefix picks one, and its weights differ."""
    inputs = _inputs(tmp_path, (4, 4))
    outs = []
    for i in (0, 4):
        out = tmp_path / f"r{i}.npz"
        rc, _, err = cli(capsys, "run", T, "--block", "Feed Forward", "--params", str(whole),
                         "--inputs", str(inputs), "--out", str(out), "--key-prefix",
                         f"Transformer Layer@{i}/Add \\& Norm~1/Feed Forward")
        assert rc == 0, err
        outs.append(np.load(out)["out0"])
    assert not np.allclose(outs[0], outs[1])
    rc, _, err = cli(capsys, "run", T, "--block", "Feed Forward", "--params", str(whole),
                     "--key-prefix", "Transformer Layer@9/Feed Forward")
    assert rc == 1 and "does not lead to this block" in err


def test_whole_model_float32_close_to_the_interpreter(tmp_path, capsys, whole):
    inputs = tmp_path / "ids.npz"
    np.savez(inputs, in0=np.array([0, 3, 1, 2]))
    ref = tmp_path / "ref.npz"
    assert main(["eval", T, "--params", str(whole), "--inputs", str(inputs), "--out",
                 str(ref)]) == 0
    out = tmp_path / "run.npz"
    rc, _, err = cli(capsys, "run", T, "--params", str(whole), "--inputs", str(inputs),
                     "--out", str(out))
    assert rc == 0, err
    a, b = np.load(out)["out0"], np.load(ref)["out0"]
    assert a.dtype == np.float32
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_missing_tensors_are_listed_at_once(tmp_path, capsys, whole):
    from ncdc.interpreter.weights import load_params, save_params

    every = load_params(whole)
    cut = {k: v for k, v in every.items() if "Multi-Head Attention/L_{q}" not in k}
    path = tmp_path / "cut.safetensors"
    save_params(cut, path)
    rc, out, _ = cli(capsys, "run", T, "--params", str(path), "--json")
    assert rc == 1
    e = json.loads(out)["error"]
    assert e["type"] == "CheckpointError"
    assert e["message"].startswith("6 learned array(s) not in the weights")
    assert all(f"Transformer Layer@{i}/Add \\& Norm/Multi-Head Attention/L_{{q}}.weight"
               in e["message"] for i in range(6))


def test_wrong_shape_names_the_tensor(tmp_path, capsys, whole):
    from ncdc.interpreter.weights import load_params, save_params

    every = dict(load_params(whole))
    key = "Embedding/E.table"
    every[key] = np.zeros((5, 4))
    path = tmp_path / "bad.safetensors"
    save_params(every, path)
    rc, _, err = cli(capsys, "run", T, "--params", str(path))
    assert rc == 1 and key in err and "(5, 4)" in err and "(4, 4)" in err


def test_synthetic_is_seeded_and_reports_blocks(capsys):
    runs = []
    for seed in (0, 0, 1):
        rc, out, err = cli(capsys, "run", T, "--params", "synthetic", "--seed", str(seed),
                           "--json")
        assert rc == 0, err
        runs.append(json.loads(out))
    assert runs[0]["outputs"] == runs[1]["outputs"] != runs[2]["outputs"]
    r = runs[0]
    assert r["weights"] == "synthetic" and r["loaded"] == 0
    names = [b["block"] for b in r["blocks"]]
    assert names[0] == "Model" and any(n.startswith("transformer_layer") for n in names)
    assert all(b["calls"] >= 1 and b["seconds"] >= 0 and b["peak_rss"] > 0
               for b in r["blocks"])
    assert r["peak_rss"] >= max(b["peak_rss"] for b in r["blocks"]) * 0.5
    assert r["module_bytes"] > 0 and set(r["seconds"]) == {"build", "load", "forward"}


@pytest.mark.slow
def test_synthetic_weights_stand_in_for_user_data_too(capsys):
    """``--params synthetic`` draws the data the spec leaves to the user as well, said in one
    line (no warning per array); the values are those ``--stand-in`` draws."""
    import warnings

    block = "Engram of Layer 1 / Token Map"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the stand-ins are announced, never warned about
        rc, out, err = cli(capsys, "run", "--params", "synthetic", "--block", block, "--json")
    assert rc == 0, err
    notes = [ln for ln in err.splitlines() if "stand-ins" in ln]
    assert len(notes) == 1 and "leaves to the user" in notes[0] and "E_{cmp}" in notes[0], err
    with pytest.warns(UserWarning, match="stand-in"):
        rc, out2, err = cli(capsys, "run", "--params", "synthetic", "--block", block,
                            "--stand-in", "--json")
    assert rc == 0, err
    (row,) = json.loads(out)["outputs"]
    assert row == json.loads(out2)["outputs"][0]
    assert row["dtype"] == "int64" and 0 <= row["min"] <= row["max"] < 50  # below hat_v


def test_preflight_and_usage_errors(capsys, tmp_path):
    rc, _, err = cli(capsys, "run", T, "--params", "synthetic", "--max-memory", "1KB")
    assert rc == 1 and "run would need about" in err and "nothing was allocated" in err
    rc, _, err = cli(capsys, "run", T, "--params", "synthetic", "--map", "m.toml")
    assert rc == 2 and "--map" in err
    rc, _, err = cli(capsys, "run", T, "--params", str(tmp_path / "none.safetensors"))
    assert rc == 2 and "cannot read it" in err
    rc, _, err = cli(capsys, "run", T, "--params", "synthetic", "--seed", "-1")
    assert rc == 2


def test_synthetic_weights_saved_and_evaluated_by_the_interpreter(tmp_path, capsys):
    """The synthetic weights a run used, written with --save-params, give the interpreter the
    run's outputs (float64)."""
    ids = tmp_path / "ids.npz"
    np.savez(ids, in0=np.array([2, 0, 3, 1]))
    w, out, ref = tmp_path / "w.safetensors", tmp_path / "r.npz", tmp_path / "e.npz"
    rc, _, err = cli(capsys, "run", T, "--params", "synthetic", "--seed", "4", "--dtype",
                     "float64", "--save-params", str(w), "--inputs", str(ids), "--out",
                     str(out))
    assert rc == 0, err
    rc, _, err = cli(capsys, "eval", T, "--params", str(w), "--inputs", str(ids), "--out",
                     str(ref))
    assert rc == 0, err
    np.testing.assert_allclose(np.load(out)["out0"], np.load(ref)["out0"], rtol=1e-12,
                               atol=1e-14)
    from ncdc.interpreter.weights import load_params

    table = load_params(w)["Embedding/E.table"]
    assert table.shape == (4, 4) and 0.3 < table.std() < 3       # normal(0, 1) init


def test_synthetic_weights_in_storage_formats_reproduce_in_the_interpreter(tmp_path, capsys):
    """Synthetic weights under --weights mxfp4 (held in the format by the module where the
    code generator supports it): saved, they give the interpreter (same policy) the run's
    outputs, and every saved weight is exactly representable in the format."""
    from ncdc.interpreter.storage_policy import decode, encode
    from ncdc.interpreter.weights import load_params

    ids = tmp_path / "ids.npz"
    np.savez(ids, in0=np.array([1, 3, 0, 2]))
    w, out, ref = tmp_path / "w.npz", tmp_path / "r.npz", tmp_path / "e.npz"
    policy = ["--weights", "*Feed Forward*=mxfp4", "--weights", "bfloat16"]
    rc, _, err = cli(capsys, "run", T, "--params", "synthetic", "--dtype", "float64",
                     "--save-params", str(w), "--inputs", str(ids), "--out", str(out), *policy)
    assert rc == 0, err
    rc, _, err = cli(capsys, "eval", T, "--params", str(w), "--inputs", str(ids), "--out",
                     str(ref), *policy)
    assert rc == 0, err
    np.testing.assert_allclose(np.load(out)["out0"], np.load(ref)["out0"], rtol=1e-12,
                               atol=1e-14)
    saved = load_params(w)
    ff = saved["Transformer Layer@1/Add \\& Norm~1/Feed Forward/L_{in}.weight"]
    np.testing.assert_array_equal(decode(encode(ff, "mxfp4", 1)), ff)   # already in E2M1
    assert not np.array_equal(ff, 0)
    table = saved["Embedding/E.table"]
    import ml_dtypes

    np.testing.assert_array_equal(table.astype(ml_dtypes.bfloat16).astype(np.float64), table)
