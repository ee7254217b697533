"""pyncd's own exports (tests/data/pyncd, copied from shared/specs/pyncd) and the TensorLogic
kinds: every export loads, validates and passes ``ncdc check``; the TensorLogic examples, the
convolution's unfolding and a hand-made TensorLogic program agree with hand-written numpy."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ncdc
from ncdc.cli import main
from ncdc.codegen import compile_torch
from ncdc.ir.errors import SpecError
from ncdc.ir.morphisms import ThreadedComposed
from ncdc.ir.operators.tensorlogic import TensorEquation
from ncdc.spec.loader import load_text
from ncdc.spec.validate import validate
from tests.conftest import DATA, PYNCD
from tests.lazy import torch

EXPORTS = sorted(PYNCD.glob("*.json"))
PROGRAM = DATA / "tensorlogic_program.json"


def test_the_exports_are_all_there():
    assert {p.name for p in EXPORTS} >= {"transformer.json", "attention_core.json",
                                         "tl_matmul.json", "tl_causal_mask.json",
                                         "convolution_matrix.json"}


@pytest.mark.parametrize("path", EXPORTS + [PROGRAM], ids=lambda p: p.stem)
def test_every_export_loads_and_validates(path):
    spec = ncdc.load(path)
    problems = [d for d in spec.validate() if d.severity == "error"]
    assert problems == []


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["exact", "emulate"])
@pytest.mark.parametrize("path", EXPORTS + [PROGRAM], ids=lambda p: p.stem)
def test_every_export_passes_ncdc_check(path, quant, capsys):
    assert main(["check", str(path), "--quant", quant]) == 0
    assert "MISMATCH" not in capsys.readouterr().out


def _both(spec, env, *inputs, params=None):
    """The interpreter's and the generated module's outputs on the same inputs."""
    run = ncdc.interpret(spec.data, env=env, params=params)
    got = run(*inputs)
    _, module = compile_torch(spec.data, env=env)
    if params:
        ncdc.codegen.load_interpreter_params(module, params)
    out = module(*(torch.as_tensor(x) for x in inputs))
    out = out if isinstance(out, tuple) else (out,)
    return got, tuple(o.detach().numpy() for o in out)


def test_tl_matmul_is_a_matrix_product():
    spec = ncdc.load(PYNCD / "tl_matmul.json")
    eq = spec.data.operator
    assert isinstance(eq, TensorEquation) and [r.name.text for r in eq.refs] == ["W", "X"]
    env = spec.bind("tiny", sizes={"i": 3, "j": 5, "k": 4}).env
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    want = w @ x
    for got in _both(spec, env, w, x):
        np.testing.assert_allclose(got[0], want, rtol=1e-12, atol=1e-12)


def test_tl_causal_mask_keeps_q_at_most_x():
    spec = ncdc.load(PYNCD / "tl_causal_mask.json")
    env = spec.bind("tiny").env
    score = np.random.default_rng(1).standard_normal((4, 4))
    want = np.triu(score)  # rows q, columns x: keep x >= q
    for got in _both(spec, env, score):
        np.testing.assert_array_equal(got[0], want)


def test_convolution_matrix_unfolds_the_input():
    """``out[x', w, c] = in[x' + w, c]`` (the StrideMorphism ``x <- 1 x' + 1 w``, pyncd's
    ``_cod_stride`` form, shift 0); reads past the end are dead and hold 0."""
    spec = ncdc.load(PYNCD / "convolution_matrix.json")
    env = spec.bind("tiny", sizes={"x": 6, "x'": 4, "w": 3}).env
    c = env.sizes(spec.data.dom[0].shape)[1]
    xin = np.random.default_rng(2).standard_normal((6, c))
    want = np.zeros((4, 3, c))
    for i in range(4):
        for j in range(3):
            if i + j < 6:
                want[i, j] = xin[i + j]
    for got in _both(spec, env, xin):
        np.testing.assert_array_equal(got[0], want)
    # a 1-d convolution with a kernel k is this unfolding contracted with k over w
    kern = np.array([0.5, -1.0, 2.0])
    conv = np.einsum("iwc,w->ic", want, kern)
    np.testing.assert_allclose(conv[:, 0], np.convolve(xin[:, 0], kern[::-1], "valid"))


def test_a_threaded_tensorlogic_program():
    """H[i,j] = sum_k W[i,k] X[k,j] [~(k == 0)];  Y[i,k] = relu(sum_j H[i,j] W[i,k]
    [|i - j| <= 1]), with W read by both steps through the routing."""
    spec = ncdc.load(PROGRAM)
    assert isinstance(spec.data, ThreadedComposed)
    assert spec.data.routing == ((0, 1), (2, 0))
    env = spec.bind("tiny").env
    rng = np.random.default_rng(3)
    w, x = rng.standard_normal((3, 5)), rng.standard_normal((5, 4))
    want = np.zeros((3, 5))
    for i in range(3):
        for k in range(5):
            total = 0.0
            for j in range(4):
                h = sum(w[i, kk] * x[kk, j] for kk in range(1, 5))
                if abs(i - j) <= 1:
                    total += h * w[i, k]
            want[i, k] = max(total, 0.0)
    for got in _both(spec, env, w, x):
        np.testing.assert_allclose(got[0], want, rtol=1e-12, atol=1e-12)


def _broken(where: str) -> str:
    doc = json.loads(PROGRAM.read_text(encoding="utf-8"))
    if where == "routing":
        doc["data"]["routing"][1][0] = 3  # the pool holds 3 entries then (0, 1, 2)
    elif where == "op":
        doc["data"]["content"][1]["operator"]["rhs"][2]["op"] = "<=>"
    elif where == "rhs":
        doc["data"]["content"][0]["operator"]["rhs"][0] = [{"__ref__": 101}]
    return json.dumps(doc)


@pytest.mark.parametrize("where,message,path", [
    ("routing", "pool entry 3", "data"),
    ("op", "unknown IversonBinOp operator '<=>'", "data.content[1].operator.rhs[2].op"),
    ("rhs", "rhs must be a list of TensorRef", "data.content[0].operator.rhs"),
])
def test_bad_tensorlogic_is_located(where, message, path):
    with pytest.raises(SpecError) as info:
        load_text(_broken(where))
    assert message in str(info.value) and f"at {path}" in str(info.value)


def _validate_changed(path, change) -> list[str]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    return [str(d) for d in validate(load_text(json.dumps(doc))) if d.severity == "error"]


def test_routing_is_checked_at_the_step():
    def change(doc):
        doc["data"]["routing"][1] = [2, 1]  # X[k, j] where step 1 reads W[i, k]

    (problem,) = _validate_changed(PROGRAM, change)
    assert "compose-mismatch" in problem and "step 1 takes R[i, k]" in problem
    assert problem.split(" at ")[-1].startswith("data.content[1]")


def test_a_weave_that_is_not_its_tensor_ref_is_reported():
    def swap(doc):
        doc["data"]["input_weaves"][0]["_shape"].reverse()

    def extra(doc):
        doc["data"]["operator"]["rhs"].append(doc["data"]["operator"]["rhs"][0])

    (problem,) = _validate_changed(PYNCD / "tl_matmul.json", swap)
    assert "operator-rank" in problem and "needs the weave [*, k]" in problem
    assert "at data.input_weaves[0]" in problem
    (problem,) = _validate_changed(PYNCD / "tl_matmul.json", extra)
    assert "operator-arity" in problem and "takes 3 operand(s)" in problem


def test_the_program_graph_follows_the_routing(tmp_path):
    out = tmp_path / "g.dot"
    assert main(["graph", str(PROGRAM), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    for edge in ('"in:0" -> "data.content[0]"', '"in:0" -> "data.content[1]"',
                 '"in:1" -> "data.content[0]"', '"data.content[0]" -> "data.content[1]"',
                 '"data.content[1]" -> "out:0"'):
        assert edge in text
    assert text.count(" -> ") == 5


def test_a_field_less_normalize_alone_compiles():
    """Alone, the Normalize's axis size m is fixed by the data (no parameter shape uses it): no
    parameter is made, so no __init__ size is needed (RMSNorm, eps 1e-5, no gain)."""
    spec = ncdc.load(PYNCD / "transformer.json")
    node = spec.block("data.content[1].body.content[0].body.content[3]")
    env = spec.bind("tiny", sizes={"m": 6, "x": 3}).env
    _, module = compile_torch(node, env=env)
    assert dict(module.state_dict()) == {}
    x = np.random.default_rng(6).standard_normal((3, 6))
    want = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(module(torch.as_tensor(x)).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(ncdc.interpret(node, env=env)(x)[0], want, rtol=1e-12)
