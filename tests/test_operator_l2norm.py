"""pyncd's ``L2Norm``, end to end: ``y = x / sqrt(sum x^2)`` over all target axes jointly,
decoded from a node written as pyncd writes it, validated, costed, and evaluated by both
backends against hand-written numpy."""
from __future__ import annotations

import numpy as np
import pytest

import ncdc
from ncdc.codegen import compile_torch
from ncdc.ir import operators as ops
from ncdc.ir.cost_rules import flops
from tests.lazy import torch

PYNCD_NAME = {"__type__": "DynamicName", "body": "L^{2}", "subscript": None, "settings": None,
              "code_form": None, "exponent": None}
"""The default name pyncd gives an ``L2Norm``, serialised as its exports write names."""


def _doc(mk, out_target=None, dt=None):
    """An ``L2Norm`` over the target ``[a, c]`` of a ``[x, a, c]`` input, in a block."""
    x, a, c = mk.axis("x", 4), mk.axis("a", 3), mk.axis("c", 2)
    node = {"__type__": "L2Norm", "name": PYNCD_NAME}
    bc = mk.bc(node, [mk.weave(["*", a, c], dt)], [mk.weave(["*"] + (out_target or [a, c]))],
               [mk.rearr([0], [x])])
    return mk.doc(mk.block(bc, mk.tag("Unit length")))


def _norm(x):
    return x / np.sqrt((x * x).sum(axis=(1, 2), keepdims=True))


def test_the_pyncd_node_decodes(mk, load_doc):
    spec = load_doc(_doc(mk))
    (b,) = [s.node for s in ncdc.ir.walk(spec.data) if isinstance(s.node, ncdc.ir.Broadcasted)]
    assert type(b.operator) is ops.L2Norm and b.operator.label == "L^{2}"
    assert b.operator.path.endswith(".operator")
    assert [d for d in spec.validate() if d.severity == "error"] == []
    assert flops(b) == 3 * 6 + 1 and b.operator.param_arrays(b) == []


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_both_backends_agree_with_numpy(mk, load_doc, dtype):
    spec = load_doc(_doc(mk))
    env = spec.bind("tiny").env
    x = np.random.default_rng(2).standard_normal((4, 3, 2)) * 10
    want = _norm(x)
    np.testing.assert_allclose((want ** 2).sum(axis=(1, 2)), 1.0, rtol=1e-12)
    got = ncdc.interpret(spec.data, env=env)(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-13)
    _, module = compile_torch(spec.data, env=env)
    assert dict(module.state_dict()) == {}
    out = module(torch.as_tensor(x.astype(dtype))).detach().numpy()
    assert out.dtype == dtype
    np.testing.assert_allclose(out, want, rtol=1e-13 if dtype == np.float64 else 1e-6)


def test_wrong_targets_and_naturals_are_reported(mk, load_doc):
    def codes(doc):
        return {d.code for d in load_doc(doc).validate() if d.severity == "error"}

    assert "operator-rank" in codes(_doc(mk, out_target=[mk.axis("z", 6)]))
    assert "operator-type" in codes(_doc(mk, dt=mk.nat(5)))


def test_the_descriptor():
    assert (ops.L2Norm.glyph, ops.L2Norm.family, ops.L2Norm.roles) == ("L2 norm", "norm", ())
    assert ops.L2Norm in ops.ALL_OPERATORS and ncdc.ir.L2Norm is ops.L2Norm
