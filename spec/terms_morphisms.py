"""Decoders for the structural morphisms of both categories and the tape terms."""
from __future__ import annotations

import sympy

from ncdc.ir.arrays import Array, ProdObject, Weave
from ncdc.ir.axes import Axis
from ncdc.ir.errors import SpecDecodeError
from ncdc.ir.morphisms import (
    Block,
    Broadcasted,
    Composed,
    Drop,
    Grab,
    Morphism,
    ParaWrap,
    ProductOfMorphisms,
    Rearrangement,
    StrideMorphism,
    StrideRow,
)
from ncdc.ir.operators import Operator
from ncdc.ir.tags import BlockTag, TapeSlot

from .builder import decoder
from .terms_numeric import name_field
from .terms_types import _cached_shape, axes_field


def morphism_field(b, obj, name, path):
    return b.check(b.field(obj, name, path), Morphism, obj, name, path)


def morphisms_field(b, obj, name, path):
    val = b.field(obj, name, path)
    if not isinstance(val, tuple) or not all(isinstance(m, Morphism) for m in val):
        raise SpecDecodeError(f"field {name!r} of {obj.get('__type__')} must be a list of "
                              "morphisms", f"{path}.{name}", node_type=obj.get("__type__"),
                              field_name=name)
    return val


def _weaves(b, obj, name, path):
    val = b.field(obj, name, path)
    if not isinstance(val, tuple) or not all(isinstance(w, Weave) for w in val):
        raise SpecDecodeError(f"field {name!r} of Broadcasted must be a list of weaves",
                              f"{path}.{name}", node_type="Broadcasted", field_name=name)
    return val


@decoder("Rearrangement", morphism=True)
def rearrangement(b, obj, path):
    mapping = b.raw(obj, "mapping", path, list)
    if not all(isinstance(m, int) and not isinstance(m, bool) for m in mapping):
        raise SpecDecodeError("mapping must be a list of integers", f"{path}.mapping",
                              node_type="Rearrangement", field_name="mapping")
    dom = _cached_shape(b, obj, "_dom")
    if dom is None:
        dom = b.field(obj, "_dom", path)
    if not isinstance(dom, tuple) or not (all(isinstance(a, Axis) for a in dom)
                                          or all(isinstance(a, Array) for a in dom)):
        raise SpecDecodeError("_dom must be a list of axes or a list of arrays", f"{path}._dom",
                              node_type="Rearrangement", field_name="_dom")
    return Rearrangement(tuple(mapping), dom, path=path)


@decoder("StrideMorphism", morphism=True)
def stride_morphism(b, obj, path):
    """Rows ``[axis, [strides...], shift]`` (``_cod_stride_shift``) or, in pyncd's linear form,
    ``[axis, [strides...]]`` (``_cod_stride``: shift 0)."""
    dom = axes_field(b, obj, "_dom", path)
    fname = "_cod_stride" if "_cod_stride" in obj and "_cod_stride_shift" not in obj \
        else "_cod_stride_shift"
    width = 2 if fname == "_cod_stride" else 3
    rows_raw = b.raw(obj, fname, path, list)
    rows = []
    for i, row in enumerate(rows_raw):
        rpath = f"{path}.{fname}[{i}]"
        if not (isinstance(row, list) and len(row) == width and isinstance(row[1], list)):
            raise SpecDecodeError("a row is [axis, [strides...]" + (", shift]" if width == 3
                                                                   else "]"),
                                  rpath, node_type="StrideMorphism", field_name=fname)
        axis = b.term(row[0], rpath + "[0]")
        strides = b.term(row[1], rpath + "[1]")
        shift = b.term(row[2], rpath + "[2]") if width == 3 else sympy.Integer(0)
        if not isinstance(axis, Axis):
            raise SpecDecodeError("a row starts with an axis", rpath + "[0]",
                                  node_type="StrideMorphism")
        if len(strides) != len(dom) or not all(isinstance(s, sympy.Basic) for s in strides):
            raise SpecDecodeError(f"a row needs one stride per domain axis ({len(dom)}), got "
                                  f"{len(strides)}", rpath + "[1]", node_type="StrideMorphism")
        if not isinstance(shift, sympy.Basic):
            raise SpecDecodeError("a row ends with a numeric shift", rpath + "[2]",
                                  node_type="StrideMorphism")
        rows.append(StrideRow(axis, tuple(strides), shift))
    return StrideMorphism(dom, tuple(rows), name_field(b, obj, path), path=path)


@decoder("Composed", morphism=True)
def composed(b, obj, path):
    content = morphisms_field(b, obj, "content", path)
    if not content:
        raise SpecDecodeError("a composition needs at least one morphism", f"{path}.content",
                              node_type="Composed", field_name="content")
    return Composed(content, path=path)


@decoder("ProductOfMorphisms", morphism=True)
def product(b, obj, path):
    return ProductOfMorphisms(morphisms_field(b, obj, "content", path), path=path)


@decoder("Block", morphism=True)
def block(b, obj, path):
    tag = b.check(b.field(obj, "block_tag", path), BlockTag, obj, "block_tag", path)
    b.titles.append(tag.plain_title)
    try:
        body = morphism_field(b, obj, "body", path)
    finally:
        b.titles.pop()
    return Block(body, tag, path=path)


@decoder("Broadcasted", morphism=True)
def broadcasted(b, obj, path):
    op = b.check(b.field(obj, "operator", path), Operator, obj, "operator", path)
    ins = _weaves(b, obj, "input_weaves", path)
    outs = _weaves(b, obj, "output_weaves", path)
    rx = morphisms_field(b, obj, "reindexings", path)
    backup = b.field(obj, "backup_degree", path, None)
    b.check(backup, ProdObject, obj, "backup_degree", path, allow_none=True)
    return Broadcasted(op, ins, outs, rx, backup.content if backup is not None else None,
                       path=path)


def _slots(b, obj, name, path):
    val = b.field(obj, name, path)
    if not isinstance(val, tuple):
        raise SpecDecodeError(f"{name} must be a list", f"{path}.{name}", node_type="ParaWrap",
                              field_name=name)
    for i, v in enumerate(val):
        if v is not None and not isinstance(v, TapeSlot):
            raise SpecDecodeError(f"tape entry of kind {type(v).__name__} is not supported "
                                  "(only plain tape slots)", f"{path}.{name}[{i}]",
                                  node_type="ParaWrap", field_name=name)
    return val


@decoder("ParaWrap", morphism=True)
def para_wrap(b, obj, path):
    return ParaWrap(morphism_field(b, obj, "body", path), _slots(b, obj, "grabs", path),
                    _slots(b, obj, "drops", path), path=path)


def _tape_port(cls):
    def dec(b, obj, path):
        tape = b.check(b.field(obj, "tape", path), TapeSlot, obj, "tape", path)
        size = b.check(b.field(obj, "size", path), Array, obj, "size", path)
        return cls(tape, size, path=path)

    return dec


decoder("Grab", morphism=True)(_tape_port(Grab))
decoder("Drop", morphism=True)(_tape_port(Drop))
