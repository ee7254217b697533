"""pyncd's nullary ``ConstantOp`` (older ``Constant`` with a ``value``) and ``Arrange``, end to
end: decoded from nodes written as pyncd writes them, validated, costed, and evaluated by both
backends against hand-written numpy."""
from __future__ import annotations

import numpy as np
import pytest

import ncdc
from ncdc.codegen import compile_torch
from ncdc.ir import operators as ops
from ncdc.ir.cost_rules import flops
from tests.lazy import torch


def _name(body, sub=None):
    return {"__type__": "DynamicName", "body": body, "subscript": sub, "settings": None,
            "code_form": None, "exponent": None}


def _only(spec, cls):
    found = [s.node for s in ncdc.ir.walk(spec.data)
             if isinstance(s.node, ncdc.ir.Broadcasted) and isinstance(s.node.operator, cls)]
    assert len(found) == 1
    return found[0]


def _errors(spec):
    return {d.code for d in spec.validate() if d.severity == "error"}


# ------------------------------------------------------------------------------ ConstantOp
def _constant_plus_input(mk, type_name="ConstantOp", value=None, dt=None):
    """``x[n] + c`` with ``c`` a nullary constant over the target ``[n]``."""
    n = mk.axis("n", 4)
    node = {"__type__": type_name, "name": _name("c"),
            "value": value if value is not None else
            {"__type__": "Multiplication", "content": [mk.int(3), {
                "__type__": "Power", "base": mk.int(2), "exponent": mk.int(-1)}]}}
    const = mk.bc(node, [], [mk.weave([n], dt)], [], backup=[])
    add = mk.bc(mk.op("AdditionOp", "+"), [mk.weave(["*"]), mk.weave(["*"])],
                [mk.weave(["*"])], [mk.rearr([0], [n]), mk.rearr([0], [n])])
    body = mk.composed(mk.product(mk.rearr_arrays([0], [mk.array([n])]), const), add)
    return mk.doc(mk.block(body, mk.tag("Add a constant")))


@pytest.mark.parametrize("type_name", ["ConstantOp", "Constant"])
def test_constant_decodes_and_both_backends_add_it(mk, load_doc, type_name):
    spec = load_doc(_constant_plus_input(mk, type_name))
    b = _only(spec, ops.ConstantOp)
    assert b.operator.value == ncdc.ir.numeric.sympy.Rational(3, 2)
    assert _errors(spec) == set()
    assert flops(b) == 0 and b.operator.param_arrays(b) == []
    x = np.array([0.0, 1.0, -2.5, 7.0])
    want = x + 1.5
    env = spec.bind(None).env
    np.testing.assert_array_equal(ncdc.interpret(spec.data, env=env)(x)[0], want)
    _, module = compile_torch(spec.data, env=env)
    for dtype in (torch.float64, torch.float32):
        out = module(torch.as_tensor(x, dtype=dtype))
        assert out.dtype == dtype
        np.testing.assert_array_equal(out.double().numpy(), want)


def test_a_numeric_constant_still_decodes_as_a_number(mk, load_doc):
    """``Constant`` with a ``symbol`` is the numeric constant, not the operator."""
    spec = load_doc(_constant_plus_input(mk, value={
        "__type__": "Constant", "symbol": {"__registered__": "enum", "type": "ConstantSymbol",
                                           "name": "PI"}}))
    b = _only(spec, ops.ConstantOp)
    x = np.zeros(4)
    got = ncdc.interpret(spec.data, env=spec.bind(None).env)(x)[0]
    np.testing.assert_allclose(got, np.full(4, np.pi), rtol=1e-15)
    assert str(b.operator.value) == "pi"


def test_a_natural_constant_must_be_whole(mk, load_doc):
    assert "operator-type" in _errors(load_doc(_constant_plus_input(mk, dt=mk.nat(9))))
    good = _constant_plus_input(mk, value=mk.int(4), dt=mk.nat(9))
    assert "operator-type" not in _errors(load_doc(good))


def test_a_constant_with_an_operand_is_refused(mk, load_doc):
    n = mk.axis("n", 4)
    node = {"__type__": "ConstantOp", "name": _name("c"), "value": mk.int(0)}
    bc = mk.bc(node, [mk.weave(["*"])], [mk.weave([n])], [mk.rearr([0], [n])])
    spec = load_doc(mk.doc(mk.block(bc, mk.tag("Bad"))))
    assert "operator-arity" in _errors(spec)


# ------------------------------------------------------------------------------ Arrange
def _positions_times(mk, stride=3, dt=None, extra_axis=False):
    """``out[b] = stride * i_b`` as the full export's rotary expansion writes it: an
    ``Arrange`` over ``b`` then an ``Arithmetic`` on naturals, then cast to reals."""
    bsz = mk.symbol("b")
    b = mk.axis("b", mk.ref(bsz))
    shape = [b] + ([mk.axis("c", 2)] if extra_axis else [])
    arrange = mk.bc({"__type__": "Arrange", "name": _name("i", _name("b"))}, [],
                    [mk.weave(shape, dt or mk.nat(mk.ref(bsz)))], [], backup=[])
    times = mk.bc(mk.op("Arithmetic", "|a| x", operator="arithmetic", formula={
        "__type__": "Multiplication", "content": [mk.int(stride), {"__type__": "FreeInput"}]}),
        [mk.weave(["*"], mk.nat(mk.ref(bsz)))],
        [mk.weave(["*"], mk.nat({"__type__": "Multiplication",
                                  "content": [mk.int(stride), mk.ref(bsz)]}))],
        [mk.rearr([0], [b])])
    real = mk.bc(mk.op("Cast", "cast"), [mk.weave(["*"], mk.nat(
        {"__type__": "Multiplication", "content": [mk.int(stride), mk.ref(bsz)]}))],
        [mk.weave(["*"])], [mk.rearr([0], [b])])
    return mk.doc(mk.block(mk.composed(arrange, times, real), mk.tag("Positions")))


def test_arrange_decodes_and_both_backends_give_the_positions(mk, load_doc):
    spec = load_doc(_positions_times(mk))
    b = _only(spec, ops.Arrange)
    assert b.operator.label.startswith("i") and b.input_weaves == ()
    assert _errors(spec) == set()
    assert flops(b) == 0
    for n in (1, 5, 12):
        env = spec.bind(None, sizes={"b": n}).env
        want = 3.0 * np.arange(n)
        np.testing.assert_array_equal(ncdc.interpret(spec.data, env=env)()[0], want)
        _, module = compile_torch(spec.data, env=env)
        np.testing.assert_array_equal(module().double().numpy(), want)


def test_arrange_alone_is_a_natural_vector(mk, load_doc):
    bsz = mk.symbol("b")
    b = mk.axis("b", mk.ref(bsz))
    node = mk.bc({"__type__": "Arrange", "name": _name("i", _name("b"))}, [],
                 [mk.weave([b], mk.nat(mk.ref(bsz)))], [], backup=[])
    spec = load_doc(mk.doc(mk.block(node, mk.tag("Positions"))))
    env = spec.bind(None, sizes={"b": 6}).env
    got = ncdc.interpret(spec.data, env=env)()[0]
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [0, 1, 2, 3, 4, 5])
    _, module = compile_torch(spec.data, env=env)
    out = module()
    assert out.dtype == torch.long
    np.testing.assert_array_equal(out.numpy(), [0, 1, 2, 3, 4, 5])


def test_arrange_needs_one_natural_axis(mk, load_doc):
    assert "operator-rank" in _errors(load_doc(_positions_times(mk, extra_axis=True)))
    assert "operator-type" in _errors(load_doc(_positions_times(mk, dt=mk.reals())))


def test_the_descriptors():
    assert (ops.ConstantOp.family, ops.Arrange.family) == ("source", "source")
    assert ops.ConstantOp in ops.ALL_OPERATORS and ops.Arrange in ops.ALL_OPERATORS
