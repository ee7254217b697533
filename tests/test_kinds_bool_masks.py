"""pyncd ``Bool`` masks: an Iverson factor over a symbolically sized axis is not computed but
read from an input the caller supplies (``"datatype": {"__type__": "Bool"}``, the weave's
``iverson_expr`` naming the predicate), one slot per axis leaf. Decoded, validated, and run by
both backends against hand-written numpy."""
from __future__ import annotations

import numpy as np
import pytest

import ncdc
from ncdc.codegen import compile_torch
from ncdc.ir.operators.tensorlogic import BOOL, TensorEquation
from tests.lazy import torch

BOOL_JSON = {"__type__": "Bool"}


def _name(body):
    return {"__type__": "DynamicName", "body": body, "subscript": None, "settings": None}


def _mask_weave(mk, shape, text, dt=None):
    w = mk.weave(shape, dt or BOOL_JSON)
    w["iverson_expr"] = text
    return w


def _causal(mk, mask_dt=None):
    """``Attn[q, x] = Score[q, x] [q <= x]`` over symbolic ``q``, ``x``: two inputs."""
    q = mk.axis("q", mk.ref(mk.symbol("Q")))
    x = mk.axis("x", mk.ref(mk.symbol("X")))
    eq = {"__type__": "TensorEquation", "name": None, "lhs_name": _name("Attn"),
          "lhs_indices": [mk.ref(q), mk.ref(x)],
          "rhs": [{"__type__": "TensorRef", "name": _name("Score"), "axes": [mk.ref(q), mk.ref(x)]},
                  {"__type__": "IversonBinOp", "op": "<=", "lhs": mk.ref(q), "rhs": mk.ref(x)}],
          "operator": None}
    bc = mk.bc(eq, [mk.weave(["*", "*"]), _mask_weave(mk, ["*", "*"], "(q <= x)", mask_dt)],
               [mk.weave(["*", "*"])], [mk.rearr([0, 1], [q, x]), mk.rearr([0, 1], [q, x])])
    return mk.doc(bc)


def _backends(spec, env, *args):
    yield ncdc.interpret(spec.data, env=env)(*args)[0]
    _, module = compile_torch(spec.data, env=env)
    out = module(*(torch.as_tensor(a) for a in args))
    yield out.detach().numpy()


def test_the_mask_weave_decodes_as_truth_values(mk, load_doc):
    spec = load_doc(_causal(mk))
    eq = spec.data.operator
    assert isinstance(eq, TensorEquation)
    assert eq.predicates == () and len(eq.masks) == 1 and len(eq.operands) == 2
    assert spec.data.input_weaves[1].datatype == BOOL
    assert [d for d in spec.validate() if d.severity == "error"] == []


def test_both_backends_multiply_by_the_supplied_mask(mk, load_doc):
    spec = load_doc(_causal(mk))
    env = spec.bind(None, sizes={"Q": 3, "X": 5}).env
    score = np.random.default_rng(4).standard_normal((3, 5))
    qi, xi = np.meshgrid(np.arange(3), np.arange(5), indexing="ij")
    mask = (qi <= xi).astype(np.int64)
    want = np.where(qi <= xi, score, 0.0)
    for got in _backends(spec, env, score, mask):
        np.testing.assert_array_equal(got, want)
    # the mask is read, not recomputed: the caller's values are what counts
    other = np.random.default_rng(5).integers(0, 2, (3, 5))
    for got in _backends(spec, env, score, other):
        np.testing.assert_array_equal(got, score * other)


def test_a_summed_axis_and_a_repeated_leaf(mk, load_doc):
    """``Y[i] = Σ_j X[i, j] [(j > 2) | (j == 2)]``: the mask has one slot per leaf
    (``[j, j]``) and the sum reads its diagonal, ``j >= 2``."""
    i = mk.axis("i", mk.ref(mk.symbol("I")))
    j = mk.axis("j", mk.ref(mk.symbol("J")))
    pred = {"__type__": "IversonBinOp", "op": "|",
            "lhs": {"__type__": "IversonBinOp", "op": ">", "lhs": mk.ref(j),
                    "rhs": {"__type__": "IversonConst", "value": mk.int(2)}},
            "rhs": {"__type__": "IversonBinOp", "op": "==", "lhs": mk.ref(j),
                    "rhs": {"__type__": "IversonConst", "value": mk.int(2)}}}
    eq = {"__type__": "TensorEquation", "name": None, "lhs_name": _name("Y"),
          "lhs_indices": [mk.ref(i)],
          "rhs": [{"__type__": "TensorRef", "name": _name("X"), "axes": [mk.ref(i), mk.ref(j)]},
                  pred], "operator": None}
    bc = mk.bc(eq, [mk.weave(["*", j]), _mask_weave(mk, [j, j], "((j > 2) | (j == 2))")],
               [mk.weave(["*"])], [mk.rearr([0], [i]), mk.rearr([], [i])])
    spec = load_doc(mk.doc(bc))
    assert [d for d in spec.validate() if d.severity == "error"] == []
    env = spec.bind(None, sizes={"I": 2, "J": 6}).env
    xin = np.random.default_rng(6).standard_normal((2, 6))
    j1, j2 = np.meshgrid(np.arange(6), np.arange(6), indexing="ij")
    mask = ((j1 > 2) | (j2 == 2)).astype(np.int64)  # materialised leaf by leaf
    want = xin[:, 2:].sum(axis=1)
    for got in _backends(spec, env, xin, mask):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_mask_must_be_bool(mk, load_doc):
    spec = load_doc(_causal(mk, mask_dt=mk.reals()))
    codes = {d.code for d in spec.validate() if d.severity == "error"}
    assert "operator-type" in codes


def test_a_mask_with_the_wrong_slots_is_reported(mk, load_doc):
    doc = _causal(mk)
    doc["data"]["input_weaves"][1]["_shape"] = [mk.TILED]
    codes = {d.code for d in load_doc(doc).validate() if d.severity == "error"}
    assert "operator-rank" in codes


@pytest.mark.parametrize("bad", [3, ["q <= x"]])
def test_a_non_text_iverson_expr_is_a_typed_error(mk, load_doc, bad):
    doc = _causal(mk)
    doc["data"]["input_weaves"][1]["iverson_expr"] = bad
    with pytest.raises(ncdc.SpecError) as err:
        load_doc(doc)
    assert "iverson_expr" in str(err.value)


def test_a_bool_result_is_the_truth_of_a_positive_sum(mk, load_doc):
    """pyncd demotes a ``Bool`` left-hand side to ``sum > 0``: ``Reach[i] = [Σ_j A[i,j] X[j] > 0]``."""
    i, j = mk.axis("i", 4), mk.axis("j", 3)
    eq = {"__type__": "TensorEquation", "name": None, "lhs_name": _name("Reach"),
          "lhs_indices": [mk.ref(i)],
          "rhs": [{"__type__": "TensorRef", "name": _name("A"), "axes": [mk.ref(i), mk.ref(j)]},
                  {"__type__": "TensorRef", "name": _name("X"), "axes": [mk.ref(j)]}],
          "operator": None}
    bc = mk.bc(eq, [mk.weave(["*", j]), mk.weave([j])], [mk.weave(["*"], BOOL_JSON)],
               [mk.rearr([0], [i]), mk.rearr([], [i])])
    spec = load_doc(mk.doc(bc))
    assert [d for d in spec.validate() if d.severity == "error"] == []
    env = spec.bind(None).env
    adj = np.array([[1.0, 0, 0], [0, 0, 0], [0, 1, 1], [0, 0, 2]])
    x = np.array([1.0, -1.0, 0.5])
    want = (adj @ x > 0).astype(np.int64)  # [1, 0, 0, 1]: row 2 sums to -0.5
    assert want.tolist() == [1, 0, 0, 1]
    for got in _backends(spec, env, adj, x):
        np.testing.assert_array_equal(np.asarray(got).astype(np.int64), want)
        assert set(np.unique(got)) <= {0, 1}
