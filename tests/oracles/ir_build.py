"""Tiny IR terms built by hand for unit tests of the interpreter (integer sizes, no JSON)."""
from __future__ import annotations

import itertools

import sympy

from ncdc.ir import (
    TILED,
    Array,
    Block,
    BlockScale,
    BlockTag,
    Broadcasted,
    Composed,
    Encoding,
    Natural,
    ProductOfMorphisms,
    Quantified,
    RawAxis,
    Reals,
    Rearrangement,
    StrideMorphism,
    StrideRow,
    Weave,
)
from ncdc.ir.datatypes import Complex
from ncdc.ir.names import Name

_uids = itertools.count(900_000)
R = Reals()
BITS = {"FP32": (32, 1), "BF16": (16, 2), "FP16": (16, 2), "E4M3": (8, 4), "E5M2": (8, 4),
        "E2M1": (4, 8), "INT64": (64, 1), "INT32": (32, 1), "UE8M0": (8, 4)}


def axis(label: str, n: int) -> RawAxis:
    return RawAxis(next(_uids), Name(label), sympy.Integer(n))


def Q(form: str, wraps=None, scale=None):
    bits, vec = BITS[form]
    return Quantified(wraps or R, sympy.Integer(bits), sympy.Integer(vec), Encoding[form], scale)


MXFP8 = Q("E4M3", scale=BlockScale(Encoding.UE8M0, sympy.Integer(32), sympy.Integer(1)))


def C(dt):
    return Complex(dt)


def nat(n, form=None):
    dt = Natural(sympy.Integer(n))
    return Q(form, wraps=dt) if form else dt


def weave(dt, *shape) -> Weave:
    return Weave(dt, tuple(TILED if s == "*" else s for s in shape))


def array(dt, *axes) -> Array:
    return Array(dt, tuple(axes))


def rearr(mapping, *axes) -> Rearrangement:
    return Rearrangement(tuple(mapping), tuple(axes))


def stride(dom, rows) -> StrideMorphism:
    return StrideMorphism(tuple(dom), tuple(
        StrideRow(ax, tuple(sympy.Integer(s) for s in strides), sympy.Integer(shift))
        for ax, strides, shift in rows))


def bc(op, ins, outs, rxs, backup=None) -> Broadcasted:
    return Broadcasted(op, tuple(ins), tuple(outs), tuple(rxs),
                       None if backup is None else tuple(backup))


def composed(*items):
    return Composed(tuple(items))


def product(*items):
    return ProductOfMorphisms(tuple(items))


def block(body, title: str, repetition: int = 1) -> Block:
    tag = BlockTag(next(_uids), None, sympy.Integer(repetition), title)
    return Block(body, tag)
