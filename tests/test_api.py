"""One public API: everything a user catches or passes comes from `ncdc`; `ncdc.interpret` and
`ncdc.compile_torch` bind a sub-block as the CLI does (sizes of the enclosing spec included)."""
from __future__ import annotations

import gc
import json

import numpy as np
import pytest
import sympy

import ncdc
from ncdc.cli import main
from tests.conftest import TRANSFORMER
from tests.lazy import torch


def test_every_public_name_resolves():
    assert set(ncdc.__all__) == set(ncdc._EXPORTS) | {"__version__"}
    for name in ncdc.__all__:
        assert getattr(ncdc, name) is not None, name
    assert set(dir(ncdc)) >= set(ncdc.__all__)
    with pytest.raises(AttributeError):
        ncdc.no_such_name  # noqa: B018


def test_errors_diagnostic_and_presets_come_from_ncdc():
    from ncdc import (
        PRESETS,
        BindingError,
        BlockLookupError,
        Diagnostic,
        EvaluationError,
        SpecDecodeError,
        SpecError,
        SpecFormatError,
        SpecTypeError,
        TruncatedError,
    )
    from ncdc.ir import errors

    for cls in (SpecFormatError, SpecDecodeError, SpecTypeError, TruncatedError, BindingError,
                EvaluationError, BlockLookupError):
        assert issubclass(cls, SpecError)
    assert SpecError is errors.SpecError and Diagnostic is errors.Diagnostic
    assert set(PRESETS) == {"released", "tiny", "medium"}
    assert isinstance(ncdc.load(TRANSFORMER).bind("tiny"), ncdc.Binding)
    with pytest.raises(ncdc.SpecFormatError):
        ncdc.load("no/such/file.json")


def _primes_after(start: int, count: int) -> list[int]:
    out, p = [], start
    while len(out) < count:
        p = sympy.nextprime(p)
        out.append(int(p))
    return out


def test_interpret_a_sub_block_with_the_sizes_of_its_spec(bundled, tmp_path, capsys):
    """p_{1} needs T_1, a symbol of the enclosing spec the block itself does not mention."""
    run = ncdc.interpret(bundled.block("p_{1}"), preset="released")
    (table,) = run()
    env = bundled.bind("released").env
    t1 = next(s for s in bundled.symbols.values() if s.label == "T_{1}")
    primes = _primes_after(16_000_000, len(table))           # the released rule, by sympy
    assert table.tolist() == primes and sum(primes) == env.size(t1)
    # exactly what the CLI computes
    out = tmp_path / "p1.npz"
    assert main(["eval", "--block", "p_{1}", "--preset", "released", "--out", str(out)]) == 0
    capsys.readouterr()
    assert np.array_equal(np.load(out)["out0"], table)


def test_block_keeps_its_spec_after_the_spec_object_is_gone():
    block = ncdc.load().block("p_{1}")
    gc.collect()
    (table,) = ncdc.interpret(block, preset="released")()
    assert table[0] == 16_000_057


def test_targets_spec_name_and_env(transformer):
    x = np.random.default_rng(1).integers(0, 4, size=4)
    whole = ncdc.interpret(transformer, sizes={"x": 4})(x)
    by_name = ncdc.interpret("Aggregator", spec=transformer)
    assert by_name.dom_shapes() == [(4, 4)] and whole[0].shape == (4, 4)
    env = transformer.bind("tiny").env
    with pytest.raises(ValueError, match="either env"):
        ncdc.interpret(transformer.block("Aggregator"), env, preset="tiny")
    with pytest.raises(TypeError):
        ncdc.interpret("Aggregator")


def test_compile_torch_binds_like_the_cli_and_matches_the_interpreter(transformer, capsys):
    from ncdc.codegen import load_interpreter_params

    ff = transformer.block("Feed Forward")
    source, module = ncdc.compile_torch(ff, sizes={"d_ff": 6})
    assert main(["compile", str(TRANSFORMER), "--block", "Feed Forward", "--size", "d_ff=6",
                 "--with", "loader", "--json"]) == 0
    cli_source = json.loads(capsys.readouterr().out)["source"]
    # the same module (compile_torch's file carries the loader); only the CLI's first line
    # names the file it came from
    assert cli_source.split("\n", 1)[1] == source.split("\n", 1)[1]
    run = ncdc.interpret(ff, sizes={"d_ff": 6})
    load_interpreter_params(module, run.params)
    x = np.random.default_rng(0).standard_normal(run.dom_shapes()[0])
    (y,) = run(x)
    m = transformer.bind("tiny").env.size(ff.cod[0].shape[-1].size)
    assert y.shape == (4, m)
    got = module(torch.from_numpy(x))
    got = got[0] if isinstance(got, tuple) else got
    assert np.allclose(got.detach().numpy(), y, rtol=1e-12, atol=1e-12)


def test_compile_torch_carries_the_runtime_asked_for(bundled):
    """``runtime`` as ``ncdc compile --with``: the loader by default, decoding's ``prefill`` and
    ``step`` when asked, an unknown feature refused typed (a ``UsageError``, one line)."""
    block = bundled.block("Sliding Window Attention")
    source, model = ncdc.compile_torch(block, preset="tiny", dtype="float32")
    assert "def load_interpreter_params" in source and not hasattr(model, "step")
    source, model = ncdc.compile_torch(block, preset="tiny", dtype="float32",
                                       runtime="decoding")
    assert callable(model.step) and callable(model.prefill)
    for bad in ("bogus", ["loader", 3], 7):
        with pytest.raises(ncdc.SpecError, match="runtime") as info:
            ncdc.compile_torch(block, preset="tiny", runtime=bad)
        assert type(info.value).__name__ == "UsageError" and "\n" not in str(info.value)
