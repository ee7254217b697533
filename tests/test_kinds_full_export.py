"""Nodes of the whole DeepSeek-V4.1-Flash export, transcribed by hand into
``tests/data/full_export/`` (its README says from where): the ``YarnRotary`` table, its
definition as a diagram (``Arrange`` and formulas on naturals), the 129,280-way
``SoftMax`` of the output probabilities, and the ``SoftMax`` of a ratio-2 compressor (over the
two tokens of each entry), alone and with the ``Einops`` that pools the values by it. Each decodes, validates, runs in both backends and
matches numpy written from the node's own parameters."""
from __future__ import annotations

import numpy as np
import pytest

import ncdc
from ncdc.codegen import compile_torch
from ncdc.ir import operators as ops
from ncdc.verify.check import check_morphism
from tests.conftest import DATA
from tests.lazy import torch

HERE = DATA / "full_export"
YARN = {"id:212388305": 160000, "id:1008931453": 16, "id:955513790": 15, "id:1257742509": 25}
"""β, κ, lo, hi of layers 2-39 (docs/format.md §11.19); the export gives them no value."""


def _yarn_table(n_pos, n_pairs, stride, beta=160000.0, kappa=16.0, lo=15.0, hi=25.0):
    """``F[p, t] = exp(i·stride·p·θ'[t])``, ``θ'[t] = β^(−t/|t|)·(1 − r + r/κ)``,
    ``r = clamp((t − lo)/(hi − lo), 0, 1)``: written out pair by pair from the node's fields."""
    out = np.empty((n_pos, n_pairs), dtype=np.complex128)
    for t in range(n_pairs):
        r = min(max((t - lo) / (hi - lo), 0.0), 1.0)
        theta = beta ** (-t / n_pairs) * (1.0 - r + r / kappa)
        for p in range(n_pos):
            angle = stride * p * theta
            out[p, t] = complex(np.cos(angle), np.sin(angle))
    return out


def _spec(name):
    return ncdc.load(HERE / name)


def _errors(spec):
    return [d for d in spec.validate() if d.severity == "error"]


@pytest.mark.parametrize("name", ["yarn_rotary.json", "yarn_rotary_expansion.json",
                                  "output_softmax.json", "compressor_softmax.json",
                                  "compressor_pooling.json"])
def test_the_transcribed_nodes_decode_and_validate(name):
    assert _errors(_spec(name)) == []


def test_the_yarn_node_keeps_its_fields():
    spec = _spec("yarn_rotary.json")
    (b,) = [s.node for s in ncdc.ir.walk(spec.data) if isinstance(s.node, ncdc.ir.Broadcasted)]
    op = b.operator
    assert type(op) is ops.YarnRotary and op.position_stride == 1
    assert [v.uid for v in (op.base, op.factor, op.ramp_start, op.ramp_end)] == [
        212388305, 1008931453, 955513790, 1257742509]  # β, κ, lo, hi of the export
    assert b.input_weaves == () and len(b.output_weaves[0].target) == 2


def test_the_yarn_table_matches_the_ramp_formula():
    spec = _spec("yarn_rotary.json")
    env = spec.bind("released", sizes={"x": 9}, constants=YARN).env
    want = _yarn_table(9, 32, stride=1)
    r = np.clip((np.arange(32) - 15) / 10, 0, 1)
    assert r[15] == 0 and r[25] == 1 and 0 < r[20] < 1  # the ramp has both ends inside |t|
    got = ncdc.interpret(spec.data, env=env)()[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    _, module = compile_torch(spec.data, env=env)
    out = module()
    assert out.is_complex() and tuple(out.shape) == (9, 32)
    np.testing.assert_allclose(out.numpy().astype(np.complex128), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("stride", [1, 2])
def test_the_expansion_of_yarn_rotary_is_the_same_table(stride):
    """The export defines ``YarnRotary`` by a diagram: positions by ``Arrange`` times ``|a|``,
    pair frequencies from ``Arrange`` over ``t``. It gives the table of positions ``|a|·b``."""
    spec = _spec("yarn_rotary_expansion.json")
    arranged = [s.node for s in ncdc.ir.walk(spec.data) if isinstance(s.node, ncdc.ir.Broadcasted)
                and isinstance(s.node.operator, ops.Arrange)]
    assert len(arranged) == 2
    env = spec.bind("released", sizes={"b": 6, "a": stride}, constants=YARN).env
    want = _yarn_table(6, 32, stride=stride)
    got = ncdc.interpret(spec.data, env=env)()[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    _, module = compile_torch(spec.data, env=env)
    np.testing.assert_allclose(module().numpy().astype(np.complex128), want, rtol=0, atol=1e-4)
    if stride == 1:  # the node and its definition agree where their positions coincide
        node = _spec("yarn_rotary.json")
        table = ncdc.interpret(node.data, env=node.bind("released", sizes={"x": 6},
                                                          constants=YARN).env)()[0]
        np.testing.assert_allclose(got, table, rtol=0, atol=1e-9)


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_the_output_softmax_at_a_reduced_vocabulary():
    spec = _spec("output_softmax.json")
    (b,) = [s.node for s in ncdc.ir.walk(spec.data) if isinstance(s.node, ncdc.ir.Broadcasted)]
    assert type(b.operator) is ops.SoftMax and b.operator.contracted is False
    env = spec.bind("released", sizes={"x": 3, "v": 11}).env
    z = np.random.default_rng(23).standard_normal((3, 11)) * 30
    want = _softmax(z)
    got = ncdc.interpret(spec.data, env=env)(z)[0]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=1e-14)
    _, module = compile_torch(spec.data, env=env)
    out = module(torch.as_tensor(z)).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-300)


def test_the_output_softmax_at_the_released_vocabulary_by_shape():
    """129,280 tokens: the size is the export's own; the module runs on the meta device."""
    spec = _spec("output_softmax.json")
    env = spec.bind("released", sizes={"x": 4}).env
    assert env.size(spec.doc.axes[2066137704].size) == 129280
    _, module = compile_torch(spec.data, env=env)
    out = module(torch.empty(4, 129280, device="meta"))
    assert out.device.type == "meta" and tuple(out.shape) == (4, 129280)


@pytest.mark.parametrize("name,sizes", [("yarn_rotary.json", {"x": 5}),
                                        ("yarn_rotary_expansion.json", {"b": 4}),
                                        ("output_softmax.json", {"x": 3, "v": 17}),
                                        ("compressor_softmax.json", {"b": 3, "c": 8}),
                                        ("compressor_pooling.json", {"b": 3, "c": 8})])
def test_the_check_tool_agrees(name, sizes):
    """``ncdc check``'s comparison: the generated module against the interpreter, float64; a
    table with no real input is computed in the dtype the check runs at."""
    spec = _spec(name)
    env = spec.bind("released", sizes=sizes,
                    constants=YARN if "yarn" in name else None).env
    res = check_morphism(spec.data, env, name=name)
    assert res.ok, res.problem
    assert res.max_rel <= 1e-12


COMPRESSOR_AXES = {"b": 774326000, "a": 679050082, "c": 1056277277}  # entries, ratio, channels


def _pair_weights(z):
    """The softmax of two scores ``z[..., 0], z[..., 1]`` written as logistic functions of
    their difference: ``w0 = 1 / (1 + e^(z1 - z0))``, ``w1 = 1 / (1 + e^(z0 - z1))``."""
    d = z[..., 1] - z[..., 0]
    return np.stack([1.0 / (1.0 + np.exp(d)), 1.0 / (1.0 + np.exp(-d))], axis=-1)


def test_the_compressor_softmax_keeps_its_fields():
    spec = _spec("compressor_softmax.json")
    assert spec.data.title == "Compressor" and "softmax over the two tokens" in (
        spec.data.tag.description)
    (b,) = [s.node for s in ncdc.ir.walk(spec.data) if isinstance(s.node, ncdc.ir.Broadcasted)]
    assert type(b.operator) is ops.SoftMax and b.operator.contracted is False
    assert [a.uid for a in b.degree] == [COMPRESSOR_AXES["b"], COMPRESSOR_AXES["c"]]
    assert [a.uid for a in b.dom[0].shape] == [COMPRESSOR_AXES[k] for k in "bca"]
    assert str(b.dom[0].datatype) == str(b.cod[0].datatype)
    env = spec.bind("released", sizes={"b": 5}).env  # a and c: the sizes the export names
    sizes = {k: env.size(spec.doc.axes[u].size) for k, u in COMPRESSOR_AXES.items()}
    assert sizes == {"b": 5, "a": 2, "c": 512}


def test_the_compressor_softmax_weighs_the_two_tokens_of_each_entry():
    spec = _spec("compressor_softmax.json")
    env = spec.bind("released", sizes={"b": 4, "c": 6}).env
    z = np.random.default_rng(29).standard_normal((4, 6, 2)) * 12
    want = _pair_weights(z)
    got = ncdc.interpret(spec.data, env=env)(z)[0]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=1e-15)
    _, module = compile_torch(spec.data, env=env)
    out = module(torch.as_tensor(z)).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-300)
    # the wires are FP32: emulated, the weights are the float32 numbers nearest the exact ones
    emulated = ncdc.interpret(spec.data, env=env, quant="emulate")(z)[0]
    np.testing.assert_allclose(emulated, want.astype(np.float32), rtol=2e-7, atol=0)
    assert np.abs(emulated - want).max() > 0  # the rounding happened


def test_the_compressor_softmax_at_the_released_width_by_shape():
    spec = _spec("compressor_softmax.json")
    env = spec.bind("released", sizes={"b": 8}).env
    _, module = compile_torch(spec.data, env=env)
    out = module(torch.empty(8, 512, 2, device="meta"))
    assert out.device.type == "meta" and tuple(out.shape) == (8, 512, 2)


def test_the_compressor_pools_each_entry_as_the_gate_weighted_sum_of_its_two_tokens():
    """The SoftMax and the ``Einops`` after it (signature ``[[0], [0]]``: multiply, sum over
    the ratio axis): entry ``e`` of channel ``c`` is ``w0·v[e, c, 0] + w1·v[e, c, 1]``."""
    spec = _spec("compressor_pooling.json")
    ein = [s.node.operator for s in ncdc.ir.walk(spec.data)
           if isinstance(s.node, ncdc.ir.Broadcasted) and type(s.node.operator) is ops.Einops]
    assert len(ein) == 1
    env = spec.bind("released", sizes={"b": 5, "c": 3}).env
    rng = np.random.default_rng(31)
    v, z = rng.standard_normal((5, 3, 2)), rng.standard_normal((5, 3, 2)) * 4
    w = _pair_weights(z)
    want = np.empty((5, 3))
    for e in range(5):
        for c in range(3):
            want[e, c] = w[e, c, 0] * v[e, c, 0] + w[e, c, 1] * v[e, c, 1]
    got = ncdc.interpret(spec.data, env=env)(v, z)[0]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    _, module = compile_torch(spec.data, env=env)
    out = module(torch.as_tensor(v), torch.as_tensor(z)).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-15)
    # a convex combination: each entry lies between its two tokens' values
    lo, hi = v.min(axis=-1), v.max(axis=-1)
    assert np.all(got >= lo - 1e-15) and np.all(got <= hi + 1e-15)
