"""Decoders for operators, one per ``__type__`` (older generation included)."""
from __future__ import annotations

import sympy

from ncdc.ir import operators as ops
from ncdc.ir.datatypes import Datatype
from ncdc.ir.errors import SpecDecodeError
from ncdc.ir.morphisms import Block, Drop, Grab, Morphism, StrideMorphism
from ncdc.ir.names import Name

from .builder import decoder
from .terms_numeric import constant as numeric_constant
from .terms_numeric import name_field, numeric


def _simple(cls):
    def dec(b, obj, path):
        return cls(name_field(b, obj, path), path=path)

    return dec


for _cls in (ops.Embedding, ops.Maximum, ops.BitwiseXor, ops.Modulo, ops.Cast, ops.FixedArray,
             ops.View, ops.Select, ops.IndexSelect, ops.PairsAsComplex, ops.Decomplex,
             ops.GenericOperator, ops.WeightedTriangularLower, ops.L2Norm, ops.Arrange):
    decoder(_cls.__name__)(_simple(_cls))


@decoder("ConstantOp")
def constant_op(b, obj, path):
    return ops.ConstantOp(name_field(b, obj, path), path=path,
                          value=numeric(b, obj, "value", path, sympy.Integer(0)))


@decoder("Constant")
def constant(b, obj, path):
    """``Constant`` names two things in pyncd: the numeric constant (``symbol``: PI, EULER,
    ...) and, in older exports, the nullary operator now called ``ConstantOp`` (``name``,
    ``value``)."""
    if "symbol" not in obj and ("value" in obj or "name" in obj):
        return constant_op(b, obj, path)
    return numeric_constant(b, obj, path)


@decoder("Identity")
def identity(b, obj, path):
    return ops.Identity(name_field(b, obj, path), path=path)


@decoder("Einops")
def einops(b, obj, path):
    sig = b.raw(obj, "signature", path, list)
    if not all(isinstance(s, list) and all(isinstance(g, int) and not isinstance(g, bool)
                                           for g in s) for s in sig):
        raise SpecDecodeError("signature must be a list of lists of group numbers",
                              f"{path}.signature", node_type="Einops", field_name="signature")
    return ops.Einops(name_field(b, obj, path), path=path,
                      signature=tuple(tuple(s) for s in sig))


@decoder("Linear")
def linear(b, obj, path):
    return ops.Linear(name_field(b, obj, path), path=path,
                      bias=b.raw(obj, "bias", path, bool, False))


@decoder("Normalize")
def normalize(b, obj, path):
    legacy = "epsilon" not in obj and "gain" not in obj
    return ops.Normalize(name_field(b, obj, path), path=path,
                         gain=b.raw(obj, "gain", path, bool, False),
                         bias=b.raw(obj, "bias", path, bool, False),
                         epsilon=None if legacy else numeric(b, obj, "epsilon", path,
                                                             sympy.Integer(0)))


@decoder("L1Norm")
def l1norm(b, obj, path):
    return ops.L1Norm(name_field(b, obj, path), path=path,
                      contracted=b.raw(obj, "contracted", path, bool, False),
                      epsilon=numeric(b, obj, "epsilon", path, sympy.Integer(0)))


@decoder("SoftMax")
def softmax(b, obj, path):
    return ops.SoftMax(name_field(b, obj, path), path=path,
                       contracted=b.raw(obj, "contracted", path, bool, False))


@decoder("AdditionOp")
def addition_op(b, obj, path):
    return ops.AdditionOp(name_field(b, obj, path), path=path,
                          part_of_fma=b.raw(obj, "part_of_fma", path, bool, False))


@decoder("Arithmetic")
def arithmetic(b, obj, path):
    formula = numeric(b, obj, "formula", path)
    return ops.Arithmetic(name_field(b, obj, path), path=path, formula=formula)


ELEMENTWISE_FUNCTIONS = {
    "sigmoid": "sigmoid", "\\sigma": "sigmoid", "σ": "sigmoid",
    "relu": "relu", "r": "relu", "\\mathrm{relu}": "relu",
    "tanh": "tanh", "\\tanh": "tanh", "gelu": "gelu", "silu": "silu", "swish": "silu",
    "exp": "exp", "\\exp": "exp", "identity": "identity", "id": "identity",
    "dropout": "identity", "\\lightning": "identity",
}
"""Canonical elementwise functions by (lower-cased) operator string or display name."""


def _elementwise(function: str | None):
    def dec(b, obj, path):
        name = name_field(b, obj, path)
        fn = function
        if fn is None:
            field = obj.get("operator")
            candidates = [field] if isinstance(field, str) else []
            if name is not None:
                candidates.append(name.body)
            for c in candidates:
                fn = ELEMENTWISE_FUNCTIONS.get(c.strip().lower())
                if fn:
                    break
        return ops.Elementwise(name, path=path, function=fn or "unknown",
                               declared=obj["__type__"])

    return dec


decoder("Elementwise")(_elementwise(None))
decoder("ReLU")(_elementwise("relu"))
decoder("Dropout")(_elementwise("identity"))


@decoder("TypeConvert")
def type_convert(b, obj, path):
    src = b.check(b.field(obj, "source", path, None), Datatype, obj, "source", path,
                  allow_none=True)
    tgt = b.check(b.field(obj, "target", path), Datatype, obj, "target", path)
    return ops.TypeConvert(name_field(b, obj, path), path=path, source=src, target=tgt)


@decoder("CovariantView")
def covariant_view(b, obj, path):
    rx = b.check(b.field(obj, "reindexing", path), StrideMorphism, obj, "reindexing", path)
    return ops.CovariantView(name_field(b, obj, path), path=path, reindexing=rx)


def _parts(cls):
    def dec(b, obj, path):
        parts = b.field(obj, "part_reindexings", path)
        if not isinstance(parts, tuple) or not parts or not all(
                isinstance(p, StrideMorphism) and len(p.dom) == 1 and len(p.rows) == 1
                for p in parts):
            raise SpecDecodeError("part_reindexings must be one-row StrideMorphisms over one "
                                  "axis each", f"{path}.part_reindexings",
                                  node_type=cls.__name__, field_name="part_reindexings")
        return cls(name_field(b, obj, path), path=path, part_reindexings=parts)

    return dec


decoder("ConcatenateAxes")(_parts(ops.ConcatenateAxes))
decoder("DeconcatenateAxes")(_parts(ops.DeconcatenateAxes))


@decoder("TopK")
def topk(b, obj, path):
    form = b.field(obj, "form", path, ops.SelectionForm.WEIGHTS)
    b.check(form, ops.SelectionForm, obj, "form", path)
    return ops.TopK(name_field(b, obj, path), path=path, k=numeric(b, obj, "k", path), form=form)


@decoder("Rotary")
def rotary(b, obj, path):
    return ops.Rotary(name_field(b, obj, path), path=path, base=numeric(b, obj, "base", path),
                      position_stride=numeric(b, obj, "position_stride", path,
                                              sympy.Integer(1)))


@decoder("YarnRotary")
def yarn_rotary(b, obj, path):
    return ops.YarnRotary(name_field(b, obj, path), path=path,
                          base=numeric(b, obj, "base", path),
                          position_stride=numeric(b, obj, "position_stride", path,
                                                  sympy.Integer(1)),
                          factor=numeric(b, obj, "factor", path),
                          ramp_start=numeric(b, obj, "ramp_start", path),
                          ramp_end=numeric(b, obj, "ramp_end", path))


def _block(b, obj, path):
    blk = b.field(obj, "block", path)
    if not isinstance(blk, Morphism):
        raise SpecDecodeError("field 'block' must be a Block", f"{path}.block",
                              node_type=obj.get("__type__"), field_name="block")
    return blk


@decoder("BlockOperator")
def block_operator(b, obj, path):
    blk = _block(b, obj, path)
    return ops.BlockOperator(name_field(b, obj, path), path=path, block=blk)


@decoder("ParaBlockOperator")
def para_block_operator(b, obj, path):
    blk = _block(b, obj, path)
    grabs = b.field(obj, "grabs", path, ())
    drops = b.field(obj, "drops", path, ())
    if not all(isinstance(g, Grab) for g in grabs) or not all(isinstance(d, Drop)
                                                              for d in drops):
        raise SpecDecodeError("grabs/drops of a ParaBlockOperator must be Grab/Drop terms",
                              path, node_type="ParaBlockOperator")
    return ops.ParaBlockOperator(name_field(b, obj, path), path=path, block=blk,
                                 grabs=tuple(grabs), drops=tuple(drops))


__all__ = ["Block", "Name"]
