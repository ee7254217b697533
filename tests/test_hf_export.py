"""``ncdc export --hf``: diagrams as Hugging Face models (docs/hf-export.md).

pyncd's ``transformer.json`` (a causal LM ending in a softmax, not incremental) and the bundled
spec's layer 0 (``Sliding Window Layer``, incremental) are exported with weights drawn here
(numpy, keyed as ``ncdc params`` lists them) and loaded back with
``trust_remote_code=True``, offline. The references are ncdc's own generated module loaded
with the same weights through its ``load_interpreter_params``, the numpy reference interpreter,
and hand-written loops and losses.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import math
import os
import sys
import tempfile
import warnings

import numpy as np
import pytest

import ncdc
from ncdc.cli import main
from tests.lazy import torch

from .conftest import TRANSFORMER, loaded

# transformers copies each loaded folder's code into its modules cache: a temporary one here
# (read when transformers is first imported)
os.environ.setdefault("HF_MODULES_CACHE", os.path.join(tempfile.gettempdir(), "ncdc-hf-modules"))
pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed")

TR_SIZES = {"v@Embedding": 13, "v@Aggregator": 13, "m": 8, "h": 2, "d_{ff}": 16,
            "k@L_{q}": 4, "k@L_{v}": 4}
"""The transformer at small sizes with a vocabulary of 13 (tokens in and out)."""

IDS = [[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]]


def size_args(sizes: dict) -> list[str]:
    return [a for k, v in sizes.items() for a in ("--size", f"{k}={v}")]


def draw_weights(path, specs, env, seed: int) -> dict:
    """Seeded normal weights (std 0.5) for every learned array, saved to ``path`` (.npz)."""
    rng = np.random.default_rng(seed)
    arrays = {p.key: rng.normal(0, 0.5, tuple(env.size(d) for d in p.shape))
              for p in specs if p.learned}
    np.savez(path, **arrays)
    return arrays


def hf_key(model, key: str) -> str:
    """The exported model's state-dict key of the interpreter's ``key``."""
    (name,) = [k for k, v in model.interpreter_keys().items() if v == key]
    return name


def export(folder, *args) -> None:
    assert main(["export", "--hf", str(folder), *map(str, args)]) == 0


def ncdc_module(morphism, env, weights, dtype="float64"):
    """ncdc's own generated module of ``morphism`` with ``weights`` loaded (interpreter keys)."""
    from ncdc import codegen

    _, module = codegen.compile_torch(morphism, env, dtype=dtype)
    sys.modules[type(module).__module__].load_interpreter_params(module, weights)
    return module


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread is the fastest on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tr(tmp_path_factory):
    """The transformer exported in float64: (folder, spec, env, weights)."""
    spec = loaded(TRANSFORMER)
    env = spec.bind("tiny", TR_SIZES).env
    root = tmp_path_factory.mktemp("hf")
    from ncdc.ir.params import param_specs

    weights = draw_weights(root / "w.npz", param_specs(spec.model(), env), env, seed=1)
    export(root / "tr", TRANSFORMER, "--params", root / "w.npz", "--dtype", "float64",
           *size_args(TR_SIZES))
    return root / "tr", spec, env, weights


@pytest.fixture(scope="module")
def tr_lm(tr):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tr[0], trust_remote_code=True)


@pytest.fixture(scope="module")
def tr_ncdc(tr):
    _, spec, env, weights = tr
    return ncdc_module(spec.model(), env, weights)


def test_the_folder_holds_config_code_weights_and_a_readme(tr):
    folder, spec, _, _ = tr
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "ncdc"
    assert config["architectures"] == ["NcdcForCausalLM"]
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_ncdc.NcdcForCausalLM"
    assert config["auto_map"]["AutoConfig"] == "configuration_ncdc.NcdcConfig"
    # the generated module's constructor keywords, at the exported sizes
    assert {config[n] for n in ("v", "v_2")} == {13} and config["m"] == 8 and config["h"] == 2
    assert config["d_ff"] == 16 and config["vocab_size"] == 13
    digest = hashlib.sha256(TRANSFORMER.read_bytes()).hexdigest()
    readme = (folder / "README.md").read_text()
    assert digest in readme and f"ncdc {ncdc.__version__}" in readme
    assert config["ncdc_spec_sha256"] == digest
    assert {p.name for p in folder.iterdir()} == {
        "config.json", "configuration_ncdc.py", "modeling_ncdc.py", "ncdc_module.py",
        "model.safetensors", "README.md"}


def test_the_folder_is_standalone(tr):
    """The written code imports torch, transformers, the standard library and itself only."""
    folder = tr[0]
    allowed = {"torch", "transformers", "math", "functools", "warnings", "dataclasses"}
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [] if node.level else [(node.module or "").split(".")[0]]
            else:
                continue
            assert set(names) <= allowed, (path.name, names)


def test_the_folders_code_is_lint_clean(tr):
    import subprocess

    ruff = pytest.importorskip("ruff")
    del ruff
    folder = tr[0]
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated",
                           "--select", "E4,E7,E9,F,B,I", "--line-length", "100",
                           *sorted(str(p) for p in folder.glob("*.py"))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_automodel_equals_ncdc_module_and_interpreter(tr, tr_ncdc):
    from transformers import AutoModel

    folder, spec, env, weights = tr
    model, info = AutoModel.from_pretrained(folder, trust_remote_code=True,
                                            output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids = torch.tensor(IDS)
    with torch.no_grad():
        ours = model(ids).last_hidden_state
        theirs = tr_ncdc(ids)
    assert ours.dtype == torch.float64
    assert torch.equal(ours, theirs)
    at_six = spec.bind("tiny", {**TR_SIZES, "x": 6}).env  # the interpreter binds the tokens too
    reference = ncdc.interpret(spec.model(), at_six, params=weights)(np.array(IDS))[0]
    np.testing.assert_allclose(ours.numpy(), reference, rtol=1e-12, atol=1e-15)
    # every key is the generated module's own under ncdc.; interpreter keys stay readable
    keys = model.interpreter_keys()
    assert set(keys) == set(model.state_dict())
    table = hf_key(model, "Embedding/E.table")
    assert table.startswith("ncdc.embedding.")
    np.testing.assert_array_equal(model.state_dict()[table].numpy(),
                                  weights["Embedding/E.table"])


def test_probabilities_are_presented_as_log_probabilities(tr_lm, tr_ncdc):
    ids = torch.tensor(IDS)
    with torch.no_grad():
        logits = tr_lm(ids).logits
        probs = tr_ncdc(ids)
    torch.testing.assert_close(logits, torch.log(probs), rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.softmax(logits, -1), probs, rtol=0, atol=1e-12)


def test_padded_batches_are_refused(tr_lm):
    ids = torch.tensor(IDS)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        torch.testing.assert_close(tr_lm(ids, attention_mask=mask).logits, tr_lm(ids).logits)
        mask[0, 0] = 0
        with pytest.raises(ValueError, match="padded batches"):
            tr_lm(ids, attention_mask=mask)


def test_save_pretrained_round_trips(tr_lm, tmp_path):
    from transformers import AutoModelForCausalLM

    tr_lm.save_pretrained(tmp_path / "again")
    assert {"modeling_ncdc.py", "configuration_ncdc.py", "ncdc_module.py"} <= {
        p.name for p in (tmp_path / "again").iterdir()}
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "again", trust_remote_code=True)
    before, after = tr_lm.state_dict(), back.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    ids = torch.tensor(IDS)
    with torch.no_grad():
        assert torch.equal(back(ids).logits, tr_lm(ids).logits)


def test_weights_are_sharded_past_the_limit(tr, tmp_path):
    from transformers import AutoModelForCausalLM

    folder, _, _, _ = tr
    out = tmp_path / "sharded"
    export(out, TRANSFORMER, "--params", folder.parent / "w.npz", "--dtype", "float64",
           "--max-shard-size", "3KB", *size_args(TR_SIZES))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in out.glob("model-*.safetensors"))
    assert len(shards) >= 3 and set(index["weight_map"].values()) == set(shards)
    assert all((out / s).stat().st_size <= 3000 + 1000 for s in shards)  # + its header
    assert not (out / "model.safetensors").exists()
    sharded = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)
    whole = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    ids = torch.tensor(IDS)
    with torch.no_grad():
        assert torch.equal(sharded(ids).logits, whole(ids).logits)
    # exported again without a limit: one file, the shards of the first export gone
    export(out, TRANSFORMER, "--params", folder.parent / "w.npz", *size_args(TR_SIZES))
    assert not list(out.glob("model-*")) and (out / "model.safetensors").exists()
    assert not (out / "model.safetensors.index.json").exists()


def test_meta_device_construction_and_loading(tr, tr_lm, monkeypatch):
    """The model builds on the meta device (no memory), and from_pretrained builds it there
    before the weights are loaded, as transformers 5 does."""
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = tr[0]
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    with torch.device("meta"):
        empty = AutoModelForCausalLM.from_config(config, trust_remote_code=True)
    assert all(p.device.type == "meta" for p in empty.parameters())
    cls, seen = type(tr_lm), []
    built = cls.__init__

    def init(self, config):
        built(self, config)
        seen.append({p.device.type for p in self.parameters()})

    monkeypatch.setattr(cls, "__init__", init)
    model = cls.from_pretrained(folder)
    assert seen == [{"meta"}]
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    table = hf_key(model, "Embedding/E.table")
    assert torch.equal(model.state_dict()[table], tr_lm.state_dict()[table])
    monkeypatch.undo()
    low = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True,
                                               low_cpu_mem_usage=True)
    assert all(torch.equal(v, tr_lm.state_dict()[k]) for k, v in low.state_dict().items())


def ncdc_loop(module, ids, steps: int, sample: bool = False):
    """Token by token with ncdc's module: the whole sequence each time, the next token the
    argmax (or a draw) of the last position's distribution."""
    ids = ids.clone()
    for _ in range(steps):
        with torch.no_grad():
            probs = module(ids)[:, -1]
        nxt = torch.multinomial(probs, 1) if sample else probs.argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], -1)
    return ids


def test_greedy_generate_equals_ncdcs_loop_and_warns_once(tr_lm, tr_ncdc):
    ids = torch.tensor(IDS)
    tr_lm._warned = False
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = tr_lm.generate(ids, max_new_tokens=8, do_sample=False)
    said = [w for w in seen if "not incremental" in str(w.message)]
    assert len(said) == 1
    assert out.shape == (2, 14)
    assert torch.equal(out, ncdc_loop(tr_ncdc, ids, 8))


def test_sampling_draws_from_the_diagrams_distribution(tr_lm, tr_ncdc):
    ids = torch.tensor(IDS)
    torch.manual_seed(7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = tr_lm.generate(ids, max_new_tokens=8, do_sample=True, top_k=0, top_p=1.0,
                             temperature=1.0, output_scores=True,
                             return_dict_in_generate=True)
    torch.manual_seed(7)
    assert torch.equal(out.sequences, ncdc_loop(tr_ncdc, ids, 8, sample=True))
    for k, scores in enumerate(out.scores):  # generate's scores are float32
        with torch.no_grad():
            probs = tr_ncdc(out.sequences[:, :6 + k])[:, -1]
        torch.testing.assert_close(torch.softmax(scores.double(), -1), probs, rtol=0,
                                   atol=1e-6)


def sgd_step(params, lr=0.1):
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad


def test_one_training_step_equals_the_same_step_on_ncdcs_module(tr):
    from transformers import AutoModelForCausalLM

    folder, spec, env, weights = tr
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    model.train()
    ref = ncdc_module(spec.model(), env, weights)
    batch = torch.from_numpy(np.random.default_rng(3).integers(0, 13, (4, 7)))
    loss = model(batch, labels=batch).loss
    loss.backward()
    sgd_step(model.parameters())
    # by hand: next-token negative log-likelihood of the diagram's own distribution
    probs = ref(batch)
    nll = -torch.log(probs[:, :-1]).gather(-1, batch[:, 1:, None]).mean()
    nll.backward()
    sgd_step(ref.parameters())
    # transformers' causal-LM loss computes in float32
    assert math.isclose(loss.item(), nll.item(), rel_tol=1e-6)
    theirs = ref.state_dict()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, theirs[key.removeprefix("ncdc.")], rtol=0,
                                   atol=1e-6)
    moved = model.state_dict()[hf_key(model, "Aggregator/L.weight")]
    assert not torch.allclose(moved, torch.from_numpy(weights["Aggregator/L.weight"]).T)


def test_gradient_checkpointing_recomputes_blocks_with_the_same_gradients(tr):
    from transformers import AutoModelForCausalLM

    folder = tr[0]
    batch = torch.tensor(IDS)
    grads, calls = [], []
    for checkpointing in (False, True):
        model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
        model.train()
        if checkpointing:
            with pytest.warns(FutureWarning):  # transformers 5's older name
                model.gradient_checkpointing_enable()
        layer = model.ncdc.transformer_layers[2]
        count = []
        layer.add_norm.register_forward_hook(lambda *a, count=count: count.append(1))
        model(batch, labels=batch).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
        calls.append(len(count))
    assert calls == [1, 2]  # the checkpointed layer ran again in the backward pass
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=0, atol=1e-14)


LAYER0 = "Sliding Window Layer"


@pytest.fixture(scope="module")
def layer0(tmp_path_factory):
    """The bundled spec's layer 0 at tiny, exported in float64: (folder, morphism, env,
    weights, inputs)."""
    from ncdc import interpreter
    from ncdc.ir.params import param_specs

    spec = loaded()
    env = spec.bind("tiny").env
    block = spec.block(LAYER0)
    root = tmp_path_factory.mktemp("hf0")
    weights = draw_weights(root / "w.npz", param_specs(block, env), env, seed=2)
    export(root / "layer0", "--block", LAYER0, "--params", root / "w.npz", "--dtype",
           "float64")
    inputs = interpreter.random_inputs(block, env, 5)
    return root / "layer0", block, env, weights, inputs


def test_layer0_automodel_equals_ncdc_module_and_interpreter(layer0):
    from transformers import AutoModel

    folder, block, env, weights, inputs = layer0
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["NcdcModel"] and config["ncdc_incremental"] is True
    assert "AutoModelForCausalLM" not in config["auto_map"]
    # the sizes it was generated at, under the generated config's own names for them
    assert config["ncdc_config"] == "SlidingWindowLayerConfig"
    assert config["hidden_width"] == 64 and config["window_size"] == 8
    assert config["ncdc_sizes"]["experts"] == "experts" and config["experts"] == 8
    assert config["ncdc_keywords"] == {"static_shapes": "static_shapes"}
    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    xs = [torch.from_numpy(x) for x in inputs]
    with torch.no_grad():
        ours = model(*xs).outputs
        theirs = ncdc_module(block, env, weights)(*xs)
    assert len(ours) == 2 and all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    reference = ncdc.interpret(block, env, params=weights)(*inputs)
    for a, b in zip(ours, reference, strict=True):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-12, atol=1e-12)


def test_layer0_decodes_with_ncdcs_decoder_state(layer0):
    """use_cache=True: prefill, then steps carrying ncdc's decoder state as past_key_values,
    give the whole sequence's outputs."""
    from transformers import AutoModel

    folder, _, _, _, inputs = layer0
    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    xs = [torch.from_numpy(x) for x in inputs]
    with torch.no_grad():
        whole = model(*xs).outputs
        out = model(*(x[:5] for x in xs), use_cache=True)
        parts, state = [out.outputs], out.past_key_values
        assert state.get_seq_length() == 5
        for lo, hi in ((5, 6), (6, 10), (10, 12)):
            out = model(*(x[lo:hi] for x in xs), past_key_values=state)
            parts.append(out.outputs)
            state = out.past_key_values
    assert state.get_seq_length() == 12
    for k, full in enumerate(whole):
        torch.testing.assert_close(torch.cat([p[k] for p in parts]), full, rtol=1e-12,
                                   atol=1e-12)


def test_layer0_gradient_checkpointing(layer0):
    from transformers import AutoModel

    folder, _, _, _, inputs = layer0
    grads, calls = [], []
    for checkpointing in (False, True):
        model = AutoModel.from_pretrained(folder, trust_remote_code=True)
        model.train()
        if checkpointing:
            model.activation_checkpointing_enable()
        count = []
        attention = model.ncdc.single_pass_mhc.body
        attention.register_forward_hook(lambda *a, count=count: count.append(1))
        outs = model(*(torch.from_numpy(x) for x in inputs)).outputs
        sum((o ** 2).sum() for o in outs).backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
        calls.append(len(count))
    assert calls == [1, 2]
    assert grads[0].keys() == grads[1].keys()
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-12, atol=1e-12)


def test_export_errors_are_one_line(tmp_path, capsys):
    afile = tmp_path / "file"
    afile.write_text("")
    assert main(["export", "--hf", str(afile), str(TRANSFORMER)]) == 2
    assert main(["export", "--hf", str(tmp_path / "d"), str(TRANSFORMER),
                 "--max-shard-size", "lots"]) == 2
    assert main(["export", "--hf", str(tmp_path / "no" / "d"), str(TRANSFORMER)]) == 2
    assert main(["export", "--hf", str(tmp_path / "d"), str(TRANSFORMER),
                 "--max-memory", "1KB"]) == 1  # refused before anything is allocated
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("error: ") for line in err)
    assert "is a file" in err[0] and "--max-shard-size" in err[1] and "does not exist" in err[2]
    assert "--max-memory" in err[3] and not (tmp_path / "d").exists()


def windowed_lm(width: int = 3, softmax: bool = True):
    """A causal LM built by hand that is incremental: token ids -> embedding -> a window of
    the last ``width`` positions -> Linear -> softmax over 13 tokens (its decoder state: the
    last ``width - 1`` embeddings; none for a width of 1, which works position by
    position); without ``softmax`` it ends in the Linear's logits."""
    from ncdc.ir import Embedding, Linear, SoftMax, View
    from ncdc.ir.axes import RawAxis
    from ncdc.ir.env import Env
    from ncdc.ir.names import Name
    from ncdc.ir.numeric import FreeNumeric
    from tests.oracles.ir_build import R, axis, bc, block, composed, nat, rearr, stride, weave

    tokens = FreeNumeric(990_101, Name("x"))
    x = RawAxis(990_102, Name("x"), tokens)
    w, m, v = axis("w", width), axis("m", 4), axis("v", 13)
    emb = bc(Embedding(Name("E")), [weave(nat(13), "*")], [weave(R, "*", m)], [rearr([0], x)])
    win = bc(View(Name("win")), [weave(R, "*", "*")], [weave(R, "*", "*", "*")],
             [stride([x, w, m], [(x, [1, -1, 0], 0), (m, [0, 0, 1], 0)])])
    mix = bc(Linear(Name("W")), [weave(R, "*", w, m)], [weave(R, "*", v)], [rearr([0], x)])
    soft = bc(SoftMax(Name("SoftMax")), [weave(R, "*", v)], [weave(R, "*", v)],
              [rearr([0], x)])
    steps = (emb, block(composed(win, mix), "Window")) + ((soft,) if softmax else ())
    return block(composed(*steps), "Windowed LM"), Env({tokens: 9})


def test_an_incremental_lm_generates_with_ncdcs_decoder_state(tmp_path):
    """generate() carries ncdc's decoder state: after the prompt, each step runs on the new
    token only, and the tokens equal ncdc's own loop over the whole sequence."""
    from transformers import AutoModelForCausalLM

    from ncdc.hf.export import export_hf
    from ncdc.ir.params import param_specs
    from ncdc.rank import RankPlan

    term, env = windowed_lm()
    weights = draw_weights(tmp_path / "w.npz", param_specs(term, env), env, seed=4)
    out = export_hf(RankPlan(term, env, str(tmp_path / "w.npz"), dtype="float64"),
                    str(tmp_path / "lm"), spec_path=None, title="Windowed LM")
    assert out.architecture == "NcdcForCausalLM" and out.decoding == "state"
    assert out.probabilities
    lm = AutoModelForCausalLM.from_pretrained(tmp_path / "lm", trust_remote_code=True)
    steps, step = [], lm.ncdc.step

    def counted(*inputs, state):
        steps.append(inputs[0].shape[-1])
        return step(*inputs, state=state)

    lm.ncdc.step = counted
    ids = torch.tensor(IDS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recomputation warning
        got = lm.generate(ids, max_new_tokens=7, do_sample=False)
    assert steps == [1] * 6  # the prompt was prefilled, then one token per step
    assert torch.equal(got, ncdc_loop(ncdc_module(term, env, weights), ids, 7))
    assert torch.equal(got, lm.generate(ids, max_new_tokens=7, do_sample=False,
                                        use_cache=False))


def test_the_readme_exports_loads_and_generates_in_five_lines_at_most(tmp_path, monkeypatch, capsys):
    """The README's section runs as it stands (the ncdc line through the CLI, the Python
    through exec), from the repository root's data, in a fresh folder."""
    import re
    import shlex
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("## Hugging Face models"):readme.index("## Python API")]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    lines = block.strip().splitlines()
    assert len(lines) <= 5
    argv = shlex.split(lines[0])
    assert argv[0] == "ncdc"
    argv = [str(TRANSFORMER) if a.endswith("transformer.json") else a for a in argv[1:]]
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    python = shlex.split("\n".join(lines[1:]))
    assert python[:2] == ["python", "-c"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(python[2], "README.md", "exec"), {})  # noqa: S102 - the README is ours
    printed = capsys.readouterr().out
    ids = [int(t) for t in re.findall(r"\d+", printed)]
    assert ids[:3] == [3, 1, 4] and len(ids) == 8 and max(ids) < 13


def test_user_data_loaded_by_from_pretrained_counts_as_given(tmp_path):
    """A block with data only the user can supply (the Engram's E_cmp, p_1, alpha_1; here
    seeded stand-ins, saved with the weights) runs once from_pretrained has loaded it."""
    from transformers import AutoModel

    from ncdc import codegen, interpreter

    spec = loaded()
    env = spec.bind("tiny").env
    block = spec.block("Engram of Layer 1")
    export(tmp_path / "engram", "--block", "Engram of Layer 1")
    model = AutoModel.from_pretrained(tmp_path / "engram", trust_remote_code=True)
    flags = {n: m.data_missing for n, m in model.named_modules() if hasattr(m, "data_missing")}
    assert flags and not any(flags.values())
    slots = codegen.generate(block, env).slot_keys

    def f32(a):  # the export's float32
        t = torch.from_numpy(a)
        return t.float() if t.is_floating_point() else t

    tape = {slots[uid]: f32(v)
            for uid, v in interpreter.random_tape(block, env, 0).items() if uid in slots}
    xs = [f32(x) for x in interpreter.random_inputs(block, env, 0)]
    with torch.no_grad():
        (out,) = model(*xs, tape=tape).outputs
    assert out.shape == xs[0].shape and bool(torch.isfinite(out).all())


def test_a_positionwise_lm_generates_on_the_new_token_only(tmp_path):
    """A window of one position needs no state: with the cache on, each step runs forward on
    the new token alone (no recomputation warning), and the tokens equal ncdc's loop."""
    from transformers import AutoModelForCausalLM

    from ncdc.hf.export import export_hf
    from ncdc.ir.params import param_specs
    from ncdc.rank import RankPlan

    term, env = windowed_lm(width=1)
    weights = draw_weights(tmp_path / "w.npz", param_specs(term, env), env, seed=5)
    out = export_hf(RankPlan(term, env, str(tmp_path / "w.npz"), dtype="float64"),
                    str(tmp_path / "lm"), spec_path=None, title="Bigram LM")
    assert out.decoding == "positionwise"
    lm = AutoModelForCausalLM.from_pretrained(tmp_path / "lm", trust_remote_code=True)
    lengths, forward = [], lm.ncdc.forward

    def counted(ids):
        lengths.append(ids.shape[-1])
        return forward(ids)

    lm.ncdc.forward = counted
    ids = torch.tensor(IDS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = lm.generate(ids, max_new_tokens=5, do_sample=False)
    assert lengths == [6, 1, 1, 1, 1]
    assert torch.equal(got, ncdc_loop(ncdc_module(term, env, weights), ids, 5))


def test_a_diagram_ending_in_logits_keeps_them(tmp_path):
    from transformers import AutoModelForCausalLM

    from ncdc.hf.export import export_hf
    from ncdc.ir.params import param_specs
    from ncdc.rank import RankPlan

    term, env = windowed_lm(softmax=False)
    weights = draw_weights(tmp_path / "w.npz", param_specs(term, env), env, seed=6)
    out = export_hf(RankPlan(term, env, str(tmp_path / "w.npz"), dtype="float64"),
                    str(tmp_path / "lm"), spec_path=None, title="Logits LM")
    assert out.architecture == "NcdcForCausalLM" and not out.probabilities
    lm = AutoModelForCausalLM.from_pretrained(tmp_path / "lm", trust_remote_code=True)
    ids = torch.tensor(IDS)
    with torch.no_grad():
        assert torch.equal(lm(ids).logits, ncdc_module(term, env, weights)(ids))


def test_an_export_is_deterministic(tmp_path):
    """The same command twice writes the same bytes (synthetic weights are seeded)."""
    for name in ("a", "b"):
        export(tmp_path / name, TRANSFORMER, "--seed", "3")
    a = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    b = {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}
    assert a == b and "model.safetensors" in a
