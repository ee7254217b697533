"""Decoders for axes, datatypes, arrays/weaves, block tags and tape slots."""
from __future__ import annotations

import sympy

from ncdc.ir.arrays import TILED, Array, ProdObject, Weave
from ncdc.ir.axes import AffineSparseAxis, Axis, ConcatenatedAxis, RawAxis, SparseAxis
from ncdc.ir.datatypes import BlockScale, Complex, Datatype, Encoding, Natural, Quantified, Reals
from ncdc.ir.errors import SpecDecodeError
from ncdc.ir.names import Name
from ncdc.ir.operators.tensorlogic import BOOL
from ncdc.ir.tags import BlockDrawing, BlockTag, CodeReference, TapeSlot

from .builder import _REGISTERED, decoder
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


_QUANTIFIED: dict[tuple, Quantified] = {}
"""Decoded quantified reals by (size, vector, form): a spec has few and uses them often."""


def _small_integer(value):
    """The int of a plain ``Integer`` object with a small positive value, else ``None``."""
    if not (value.__class__ is dict and value.get("__type__") == "Integer"
            and "__ref__" not in value and "__registered__" not in value):
        return None
    v = value.get("_value")
    return v if v.__class__ is int and 0 < v < 1 << 16 else None


def _quantified_key(obj):
    """``(size, vector, form)`` of a quantified-reals object of the usual shape (plain
    ``Reals``, small integers, an already seen encoding, no scale), else ``None``. (The tests
    of ``_plain`` are written out: this runs for every array and weave.)"""
    if not (obj.__class__ is dict and obj.get("__type__") == "Quantified"
            and "__ref__" not in obj and "__registered__" not in obj
            and obj.get("scale") is None):
        return None
    wraps = obj.get("wraps")
    if not (wraps.__class__ is dict and wraps.get("__type__") == "Reals"
            and "__ref__" not in wraps and "__registered__" not in wraps):
        return None
    size = _small_integer(obj.get("size"))
    vector = _small_integer(obj["vector"]) if "vector" in obj else 1
    form = _seen_registered(obj.get("form"))
    if size is None or vector is None or not isinstance(form, Encoding):
        return None
    return size, vector, form


def _seen_registered(value):
    """The registered value ``value`` names when the builder has decoded it before, else
    ``None``."""
    if value.__class__ is not dict or "__ref__" in value or "__registered__" not in value:
        return None
    get = value.get
    try:  # the memo's keys hold only strings and None: nothing else equals one
        return _REGISTERED.get((get("__registered__"), get("type"), get("name"), get("repr")))
    except TypeError:  # an unhashable field: not a registered value the builder decoded
        return None


def _datatype(b, obj, path):
    """``datatype_field(b, obj, "datatype", path)``, a usual quantified real from the memo."""
    key = _quantified_key(obj.get("datatype"))
    hit = _QUANTIFIED.get(key) if key is not None else None
    return hit if hit is not None else datatype_field(b, obj, "datatype", path)


def _cached_shape(b, obj, name="_shape"):
    """The field ``name`` (a list) of ``obj`` when each item is TILED or a reference the
    builder has decoded, else ``None`` (the generic field decoder then reads it)."""
    items = obj.get(name)
    if items.__class__ is not list:
        return None
    cache, out = b.cache, []
    for item in items:
        if item.__class__ is not dict:
            return None
        rid = item.get("__ref__")
        hit = cache.get(rid) if rid.__class__ is int else _seen_registered(item)
        if hit is None:
            return None
        out.append(hit)
    return tuple(out)


@decoder("Quantified")
def quantified(b, obj, path):
    key = _quantified_key(obj)
    if key is not None:
        hit = _QUANTIFIED.get(key)
        if hit is not None:
            return hit
    out = _quantified(b, obj, path)
    if key is not None and len(_QUANTIFIED) < 4096:
        _QUANTIFIED[key] = out
    return out


def _quantified(b, obj, path):
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
    dt = _datatype(b, obj, path)
    shape = _cached_shape(b, obj)
    if shape is None or not all(isinstance(a, Axis) for a in shape):
        shape = axes_field(b, obj, "_shape", path)
    return Array(dt, shape)


@decoder("Weave")
def weave(b, obj, path):
    _iverson(b, obj, path)
    shape = _cached_shape(b, obj)
    if shape is None:
        shape = b.field(obj, "_shape", path)
    if not isinstance(shape, tuple) or not all(isinstance(a, Axis) or a is TILED
                                               for a in shape):
        raise SpecDecodeError("a weave's _shape holds axes and TILED", f"{path}._shape",
                              node_type="Weave", field_name="_shape")
    return Weave(_datatype(b, obj, path), shape)


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


def _plain(value, type_name: str) -> bool:
    """Whether ``value`` is an object the builder decodes by its ``__type__`` ``type_name``."""
    return (value.__class__ is dict and value.get("__type__") == type_name
            and "__ref__" not in value and "__registered__" not in value)


_ONE = sympy.Integer(1)


def _usual_tag(obj, path):
    """The block tag of ``obj`` when it has the usual shape (a UID with an integer id and no or
    a plain-string name; repetition absent or a small ``Integer``; aesthetics of plain strings,
    usual code references, no or an already seen drawing), else ``None``: the generic decoders then
    decode it and raise what they raise. Both give the same tag. (The tests of ``_plain`` are
    written out: this runs for every tag.)"""
    get = obj.get
    uid, aes, rep = get("uid"), get("aesthetics"), get("repetition", _ONE)
    if not (uid.__class__ is dict and uid.get("__type__") == "UID" and "__ref__" not in uid
            and "__registered__" not in uid and aes.__class__ is dict
            and aes.get("__type__") == "BlockAesthetics" and "__ref__" not in aes
            and "__registered__" not in aes):
        return None
    ident, name = uid.get("_id"), uid.get("_name")
    if ident.__class__ is not int or not (name is None or name.__class__ is str):
        return None
    if rep is not _ONE:
        if not _plain(rep, "Integer"):
            return None
        value = rep.get("_value")
        rep = _INTEGER_VALUES.get(value) if value.__class__ is int else None
        if rep is None:
            return None
    get = aes.get
    title, refs = get("title"), get("references")
    description, fill_color, formula = get("description"), get("fill_color"), get("formula")
    if not (title.__class__ is str and (description is None or description.__class__ is str)
            and (fill_color is None or fill_color.__class__ is str)
            and (formula is None or formula.__class__ is str)):
        return None
    if refs is None:
        refs = ()
    elif refs.__class__ is list:
        refs = tuple([_usual_reference(r) for r in refs])
        if None in refs:
            return None
    else:
        return None
    drawing = get("drawing")
    if drawing is not None:
        drawing = _seen_registered(drawing)
        if not isinstance(drawing, BlockDrawing):
            return None
    return BlockTag(ident, Name(name) if name is not None else None, rep, title, description,
                    formula, fill_color, refs, drawing, path=path)


def _usual_reference(obj):
    """The code reference of ``obj`` when its fields are plain, else ``None``; equal ones are
    one object (a spec cites few places, from many tags)."""
    if not (obj.__class__ is dict and obj.get("__type__") == "CodeReference"
            and "__ref__" not in obj and "__registered__" not in obj):
        return None
    get = obj.get
    label, url, path, line, end_line = (get("label"), get("url"), get("path"), get("line"),
                                        get("end_line"))
    # (``_REFERENCE_FIELDS``, written out; checked before the memo: True == 1)
    if not ((label is None or label.__class__ is str) and (url is None or url.__class__ is str)
            and (path is None or path.__class__ is str)
            and (line is None or line.__class__ is int)
            and (end_line is None or end_line.__class__ is int)):
        return None
    vals = (label, url, path, line, end_line)
    hit = _REFERENCES.get(vals)
    if hit is not None:
        return hit
    hit = CodeReference(*vals)
    if len(_REFERENCES) < 4096:
        _REFERENCES[vals] = hit
    return hit


_REFERENCES: dict[tuple, CodeReference] = {}


_INTEGER_VALUES = {v: sympy.Integer(v) for v in range(1, 65)}


@decoder("BlockTag")
def block_tag(b, obj, path):
    tag = _usual_tag(obj, path)
    if tag is not None:
        return tag
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
