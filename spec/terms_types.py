"""Decoders for axes, datatypes, arrays/weaves, block tags and tape slots."""
from __future__ import annotations

import sympy

from ncdc.ir.arrays import TILED, Array, ProdObject, Weave
from ncdc.ir.axes import AffineSparseAxis, Axis, ConcatenatedAxis, RawAxis, SparseAxis
from ncdc.ir.datatypes import BlockScale, Complex, Datatype, Encoding, Natural, Quantified, Reals
from ncdc.ir.errors import SpecDecodeError
from ncdc.ir.operators.tensorlogic import BOOL
from ncdc.ir.tags import BlockDrawing, BlockTag, CodeReference, TapeSlot

from .builder import decoder
from .terms_numeric import numeric, uid_field


def axes_field(b, obj, name, path, default=...):
    val = b.field(obj, name, path, default)
    if val is default and default is not ...:
        return val
    if not isinstance(val, tuple) or not all(isinstance(a, Axis) for a in val):
        raise SpecDecodeError(f"field {name!r} of {obj.get('__type__')} must be a list of axes",
                              f"{path}.{name}", node_type=obj.get("__type__"), field_name=name)
    return val


def datatype_field(b, obj, name, path, default=...):
    val = b.field(obj, name, path, default)
    if val is default and default is not ...:
        return val
    return b.check(val, Datatype, obj, name, path)


@decoder("RawAxis")
def raw_axis(b, obj, path):
    uid, name = uid_field(b, obj, path)
    return RawAxis(uid, name, numeric(b, obj, "_size", path), path=path)


@decoder("AffineSparseAxis")
def affine_sparse_axis(b, obj, path):
    uid, name = uid_field(b, obj, path)
    guides = axes_field(b, obj, "guides", path, ())
    strides = b.field(obj, "guide_strides", path, ())
    if not isinstance(strides, tuple) or len(strides) != len(guides) or not all(
            isinstance(s, sympy.Basic) for s in strides):
        raise SpecDecodeError("guide_strides must hold one numeric per guide",
                              f"{path}.guide_strides", node_type="AffineSparseAxis",
                              field_name="guide_strides")
    return AffineSparseAxis(uid, name, numeric(b, obj, "_size", path), path=path,
                            guides=guides, guide_strides=strides,
                            stride=numeric(b, obj, "stride", path),
                            shift=numeric(b, obj, "shift", path),
                            extent=numeric(b, obj, "extent", path, None))


@decoder("SparseAxis")
def sparse_axis(b, obj, path):
    uid, name = uid_field(b, obj, path)
    return SparseAxis(uid, name, numeric(b, obj, "_size", path), path=path,
                      activity=numeric(b, obj, "activity", path))


@decoder("ConcatenatedAxis")
def concatenated_axis(b, obj, path):
    uid, name = uid_field(b, obj, path)
    parts = axes_field(b, obj, "parts", path)
    size = numeric(b, obj, "_size", path, None)
    if size is None:
        size = sympy.Add(*[p.size for p in parts])
    return ConcatenatedAxis(uid, name, size, path=path, parts=parts)


@decoder("Reals")
def reals(b, obj, path):
    return _REALS


_REALS = Reals()


@decoder("Natural")
def natural(b, obj, path):
    return Natural(numeric(b, obj, "max_value", path))


@decoder("Bool")
def bool_(b, obj, path):
    """pyncd's truth values, the datatype of an Iverson factor's input mask: ``Nat<2>``."""
    return BOOL


@decoder("Complex")
def complex_(b, obj, path):
    return Complex(datatype_field(b, obj, "base", path))


@decoder("BlockScale")
def block_scale(b, obj, path):
    form = b.check(b.field(obj, "form", path), Encoding, obj, "form", path)
    return BlockScale(form, numeric(b, obj, "channels", path), numeric(b, obj, "rows", path,
                                                                       sympy.Integer(1)))


@decoder("Quantified")
def quantified(b, obj, path):
    form = b.check(b.field(obj, "form", path), Encoding, obj, "form", path)
    scale = b.check(b.field(obj, "scale", path, None), BlockScale, obj, "scale", path,
                    allow_none=True)
    return Quantified(datatype_field(b, obj, "wraps", path), numeric(b, obj, "size", path),
                      numeric(b, obj, "vector", path, sympy.Integer(1)), form, scale)


def _iverson(b, obj, path):
    """``iverson_expr``: pyncd's text of the predicate a ``Bool`` mask weave carries (the
    equation's ``rhs`` holds the predicate itself, so the text is only checked to be one)."""
    expr = obj.get("iverson_expr")
    if expr is not None and expr.__class__ is not str:
        b.raw(obj, "iverson_expr", path, (str, type(None)), None)  # raises, naming the field


@decoder("Array")
def array(b, obj, path):
    _iverson(b, obj, path)
    return Array(datatype_field(b, obj, "datatype", path), axes_field(b, obj, "_shape", path))


@decoder("Weave")
def weave(b, obj, path):
    _iverson(b, obj, path)
    shape = b.field(obj, "_shape", path)
    if not isinstance(shape, tuple) or not all(isinstance(a, Axis) or a is TILED
                                               for a in shape):
        raise SpecDecodeError("a weave's _shape holds axes and TILED", f"{path}._shape",
                              node_type="Weave", field_name="_shape")
    return Weave(datatype_field(b, obj, "datatype", path), shape)


@decoder("ProdObject")
def prod_object(b, obj, path):
    return ProdObject(axes_field(b, obj, "content", path))


_REFERENCE_FIELDS = (("label", str), ("url", str), ("path", str), ("line", int),
                     ("end_line", int))


@decoder("CodeReference")
def code_reference(b, obj, path):
    vals = []
    for k, t in _REFERENCE_FIELDS:  # fast path: plain optional fields, checked in place
        v = obj.get(k)
        if v is not None and (v.__class__ is not t):
            v = b.raw(obj, k, path, (t, type(None)), None)  # raises, naming the field
        vals.append(v)
    return CodeReference(*vals)


@decoder("BlockAesthetics")
def block_aesthetics(b, obj, path):
    refs = b.field(obj, "references", path, None) or ()
    if not isinstance(refs, (tuple, list)) or not all(isinstance(r, CodeReference)
                                                       for r in refs):
        raise SpecDecodeError("references must be CodeReferences", f"{path}.references",
                              node_type="BlockAesthetics", field_name="references")
    drawing = b.field(obj, "drawing", path, None)
    b.check(drawing, BlockDrawing, obj, "drawing", path, allow_none=True)
    return {
        "title": b.raw(obj, "title", path, str),
        "description": b.raw(obj, "description", path, (str, type(None)), None),
        "fill_color": b.raw(obj, "fill_color", path, (str, type(None)), None),
        "formula": b.raw(obj, "formula", path, (str, type(None)), None),
        "references": tuple(refs),
        "drawing": drawing,
    }


@decoder("BlockTag")
def block_tag(b, obj, path):
    uid, counter = uid_field(b, obj, path)
    aes = b.field(obj, "aesthetics", path)
    if not isinstance(aes, dict):
        raise SpecDecodeError("aesthetics must be BlockAesthetics", f"{path}.aesthetics",
                              node_type="BlockTag", field_name="aesthetics")
    rep = numeric(b, obj, "repetition", path, sympy.Integer(1))
    return BlockTag(uid, counter, rep, path=path, **aes)


@decoder("TapeSlot")
def tape_slot(b, obj, path):
    uid, name = uid_field(b, obj, path)
    return TapeSlot(uid, name, path=path)
