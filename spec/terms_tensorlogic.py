"""Decoders for pyncd's TensorLogic kinds: ``TensorEquation`` and its right-hand factors
(``TensorRef``, the Iverson predicate nodes), the ``NormAxis`` marker and ``ThreadedComposed``."""
from __future__ import annotations

import sympy

from ncdc.ir.axes import Axis
from ncdc.ir.errors import SpecDecodeError, SpecError
from ncdc.ir.morphisms import ThreadedComposed
from ncdc.ir.operators import Operator
from ncdc.ir.operators.tensorlogic import (
    BINARY_OPS,
    UNARY_OPS,
    IversonBinOp,
    IversonConst,
    IversonUnaryOp,
    TensorEquation,
    TensorRef,
)

from .builder import decoder
from .terms_morphisms import morphisms_field
from .terms_numeric import name_field, numeric
from .terms_types import axes_field, raw_axis

decoder("NormAxis")(raw_axis)  # pyncd: a RawAxis marking a normalised dimension; same meaning


def _leaf_or_node(b, obj, name, path):
    val = b.field(obj, name, path)
    if not isinstance(val, (Axis, IversonConst, IversonBinOp, IversonUnaryOp)):
        raise SpecDecodeError(f"field {name!r} of {obj.get('__type__')} must be an axis, an "
                              f"IversonConst or an Iverson node, not {type(val).__name__}",
                              f"{path}.{name}", node_type=obj.get("__type__"), field_name=name)
    return val


def _op(b, obj, path, allowed):
    op = b.raw(obj, "op", path, str)
    if op not in allowed:
        raise SpecDecodeError(f"unknown {obj['__type__']} operator {op!r} (known: "
                              f"{', '.join(allowed)})", f"{path}.op",
                              node_type=obj["__type__"], field_name="op")
    return op


@decoder("IversonBinOp")
def iverson_bin_op(b, obj, path):
    return IversonBinOp(_op(b, obj, path, BINARY_OPS), _leaf_or_node(b, obj, "lhs", path),
                        _leaf_or_node(b, obj, "rhs", path))


@decoder("IversonUnaryOp")
def iverson_unary_op(b, obj, path):
    return IversonUnaryOp(_op(b, obj, path, UNARY_OPS), _leaf_or_node(b, obj, "operand", path))


@decoder("IversonConst")
def iverson_const(b, obj, path):
    value = numeric(b, obj, "value", path)
    if not isinstance(value, sympy.Integer):
        raise SpecDecodeError("an IversonConst holds an integer", f"{path}.value",
                              node_type="IversonConst", field_name="value")
    return IversonConst(value)


@decoder("TensorRef")
def tensor_ref(b, obj, path):
    return TensorRef(name_field(b, obj, path), axes_field(b, obj, "axes", path, ()))


@decoder("TensorEquation")
def tensor_equation(b, obj, path):
    rhs = b.field(obj, "rhs", path, ())
    if not isinstance(rhs, tuple) or not all(
            isinstance(f, (TensorRef, IversonBinOp, IversonUnaryOp)) for f in rhs):
        raise SpecDecodeError("rhs must be a list of TensorRef and Iverson predicate factors "
                              "(the older (name, axes) pairs are not read)", f"{path}.rhs",
                              node_type="TensorEquation", field_name="rhs")
    inner = b.field(obj, "operator", path, None)
    b.check(inner, Operator, obj, "operator", path, allow_none=True)
    lhs_name = name_field(b, obj, path, "lhs_name")
    return TensorEquation(name_field(b, obj, path), path=path, lhs_name=lhs_name,
                          lhs_indices=axes_field(b, obj, "lhs_indices", path, ()), rhs=rhs,
                          operator=inner)


@decoder("ThreadedComposed", morphism=True)
def threaded_composed(b, obj, path):
    steps = morphisms_field(b, obj, "content", path)
    routing = b.raw(obj, "routing", path, list)
    n_external = b.raw(obj, "n_external", path, int)
    if not steps:
        raise SpecDecodeError("a ThreadedComposed needs at least one step", f"{path}.content",
                              node_type="ThreadedComposed", field_name="content")
    if len(routing) != len(steps) or not all(
            isinstance(r, list) and all(isinstance(i, int) and not isinstance(i, bool)
                                        for i in r) for r in routing):
        raise SpecDecodeError(f"routing must hold one list of pool indices per step "
                              f"({len(steps)})", f"{path}.routing",
                              node_type="ThreadedComposed", field_name="routing")
    try:
        return ThreadedComposed.build(steps, tuple(tuple(r) for r in routing), n_external, path)
    except SpecDecodeError:
        raise
    except SpecError as exc:  # a step that does not type, or routing that does not fit
        raise SpecDecodeError(exc.message, exc.json_path or path, node_type="ThreadedComposed",
                              field_name="routing") from None

