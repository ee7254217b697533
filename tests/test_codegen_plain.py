"""Exact code is plain: a module generated for exact arithmetic holds no rounding call, one
generated for emulation rounds (and matches the interpreter bit for bit, tests/test_codegen_check.py),
and a file pastes only the runtime helpers (codegen/prelude/*.py) its own code reads."""
from __future__ import annotations

import ast

import pytest

from ncdc import interpreter
from ncdc.codegen import generate, instantiate, load_module
from ncdc.codegen.generate import PRELUDE_ORDER, _prelude, _read, used_preludes
from tests.lazy import torch


@pytest.fixture(scope="module")
def tiny(bundled):
    return bundled.bind("tiny").env


def _calls_named(source: str, name: str) -> int:
    """Calls ``name(...)`` or ``<anything>.name(...)`` in ``source``."""
    n = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == name) or (
                    isinstance(f, ast.Attribute) and f.attr == name):
                n += 1
    return n


def _defined(source: str) -> set[str]:
    return {n.name for n in ast.parse(source).body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def test_exact_layer_has_no_rounding_and_emulate_rounds(bundled, tiny):
    block = bundled.block("Sliding Window Layer")
    exact = generate(block, tiny, quant="exact")
    emulate = generate(block, tiny, quant="emulate")
    assert _calls_named(exact.source, "held") == 0
    assert "round_to" not in _defined(exact.source) and "held" not in _defined(exact.source)
    assert not exact.root.needs_quant
    assert _calls_named(emulate.source, "held") >= 50
    assert {"held", "round_to", "mx_block_round"} <= _defined(emulate.source)
    assert emulate.root.needs_quant


def test_expert_gate_pastes_only_what_it_reads(bundled, tiny):
    source = generate(bundled.block("Expert Gate"), tiny).source
    names = _defined(source)
    for helper in ("shard", "load_shard", "gather_full", "decode", "live_pairs", "held",
                   "affine_read", "chunked"):
        assert helper not in names, helper
    assert "ExpertGate" in names and "load_interpreter_params" not in names


@pytest.mark.parametrize("block", ["Mixing Coefficients", "Attention Core"])
def test_blocks_without_experts_have_no_pairs_or_sharding(bundled, tiny, block):
    names = _defined(generate(bundled.block(block), tiny).source)
    assert not names & {"live_pairs", "every_pair", "pairwise_matmul", "add_rows", "shard",
                        "shard_experts", "decode"}


def test_runtime_comes_only_on_request(bundled, tiny):
    """The default file carries the model and the helpers its classes call, no runtime feature;
    each feature asked for brings its helpers and methods, ``distributed`` the loader too, and a
    model without ``decoding`` has no ``prefill`` or ``step``."""
    from ncdc.codegen.generate import runtime_features

    layer = bundled.block("Sliding Window Layer")
    features = {"loader": {"load_interpreter_params"}, "decoding": {"decode", "token_read"},
                "distributed": {"shard", "load_shard", "gather_full", "shard_experts"}}
    every = set().union(*features.values())
    lean = generate(layer, tiny)
    assert not _defined(lean.source) & every and lean.runtime == frozenset()
    for word in ("PARAM_KEYS", "PARAM_LAYOUT", "EXPERT_DIMS", "token_positions", "prefill"):
        assert word not in lean.source, word
    module = instantiate(load_module(lean.source), lean.class_name, torch.float64)
    assert not hasattr(module, "step") and not hasattr(module, "prefill")
    for name, helpers in features.items():
        g = generate(layer, tiny, runtime={name})
        names = _defined(g.source)
        brought = set().union(*(features[n] for n in runtime_features({name})))
        assert helpers <= names and not names & (every - brought), name
        assert ("def step(" in g.source) == (name == "decoding")
    assert runtime_features("all") == set(features)
    assert runtime_features("distributed") == {"distributed", "loader"}
    with pytest.raises(ValueError, match="unknown runtime feature 'cache'"):
        generate(layer, tiny, runtime={"cache"})
    with pytest.raises(ValueError, match="no loader"):
        lean.load_params(module, {})


def test_model_keeps_the_helpers_it_calls(bundled, tiny):
    source = generate(interpreter.prefix(bundled.data), tiny, runtime="all").source
    names = _defined(source)
    assert {"live_pairs", "pairwise_matmul", "shard", "shard_experts", "decode",
            "affine_read", "require_data"} <= names
    assert "held" not in names
    # every global the file reads is defined in it, imported or a builtin
    tree = ast.parse(source)
    bound = set(names) | {a.asname or a.name.split(".")[0] for n in ast.walk(tree)
                          if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    bound |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name)}
    bound |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    import builtins
    missing = _read(tree) - bound - set(dir(builtins)) - {"__name__", "__file__"}
    assert not missing


def test_used_preludes_follow_globals_not_locals():
    # a local named like a helper reads nothing; a global call does, through other preludes
    local = "def f(x):\n    held = x\n    return held\n"
    assert used_preludes([local]) == set()
    assert used_preludes(["def f(x):\n    return held(x, 'BF16')\n"]) == {"quant"}
    everything = set().union(*(_read(ast.parse(_prelude(n)[1])) for n in PRELUDE_ORDER))
    assert "held" not in _read(ast.parse(_prelude("chunks")[1]))
    assert "torch" in everything


def test_compile_cli_with_names_the_runtime(tmp_path, capsys):
    """``ncdc compile --with``: the features asked for are in the file and its JSON; an unknown
    one is a one-line usage error."""
    import json

    from ncdc.cli import main

    out = tmp_path / "gate.py"
    assert main(["compile", "--block", "Expert Gate", "--with", "decoding,distributed", "-o",
                 str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["runtime"] == ["decoding", "distributed", "loader"]
    assert {"load_interpreter_params", "shard"} <= _defined(out.read_text("utf-8"))
    assert main(["compile", "--block", "Expert Gate", "--with", "cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --with: unknown runtime feature 'cache'")


def test_only_the_prelude_definitions_used_are_pasted(bundled, tiny):
    """Layer 0 reads ``affine_read`` but never ``affine_write``: it carries the one, not the
    other, under a heading saying the prelude is there in part; a prelude used whole says
    nothing; every global the file reads is defined in it."""
    source = generate(bundled.block("Sliding Window Layer"), tiny).source
    names = _defined(source)
    assert "affine_read" in names and "_positions" in names and "affine_write" not in names
    assert "(codegen/prelude/views.py, in part) ----" in source
    assert "(codegen/prelude/chunks.py) ----" in source
    assert '"""The budget of one chunk' in source  # an assignment keeps its docstring
    tree = ast.parse(source)
    bound = names | {a.asname or a.name.split(".")[0] for n in ast.walk(tree)
                     if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    bound |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name)}
    import builtins
    assert not _read(tree) - bound - set(dir(builtins))
