"""Decoders for names, uids and numerics (sizes, constants, formulas)."""
from __future__ import annotations

import functools

import sympy

from ncdc.ir.errors import SpecDecodeError
from ncdc.ir.names import Name
from ncdc.ir.numeric import (
    FREE_INPUT,
    MAX_BITS,
    FreeNumeric,
    IsPositive,
    Sigmoid,
    power_bits,
)

from .builder import decoder


def _num(b, obj, name, path, default=...):
    val = b.field(obj, name, path, default)
    if val is default and default is not ...:
        return val
    if not isinstance(val, sympy.Basic):
        raise SpecDecodeError(f"field {name!r} of {obj.get('__type__')} should be a numeric, "
                              f"got {type(val).__name__}", f"{path}.{name}",
                              node_type=obj.get("__type__"), field_name=name)
    return val


numeric = _num


@decoder("DynamicName")
def dynamic_name(b, obj, path):
    body = b.raw(obj, "body", path, str)
    sub = b.field(obj, "subscript", path, None)
    exp = b.field(obj, "exponent", path, None)
    settings = obj.get("settings")
    absolute = bool(isinstance(settings, dict) and settings.get("absolute"))
    code_form = b.raw(obj, "code_form", path, (str, type(None)), None)
    for nm, v in (("subscript", sub), ("exponent", exp)):
        b.check(v, Name, obj, nm, path, allow_none=True)
    return Name(body, sub, exp, code_form, absolute)


@decoder("DynamicNameSettings")
def name_settings(b, obj, path):
    return dict(obj)


@decoder("UID")
def uid(b, obj, path):
    uid_ = b.raw(obj, "_id", path, int)
    name = b.field(obj, "_name", path, None)
    if isinstance(name, str):
        name = Name(name)
    b.check(name, Name, obj, "_name", path, allow_none=True)
    return uid_, name


def name_field(b, obj, path, field="name"):
    """An operator/morphism name: a DynamicName, a plain string or null."""
    val = b.field(obj, field, path, None)
    if isinstance(val, str):
        return Name(val)
    return b.check(val, Name, obj, field, path, allow_none=True)


def uid_field(b, obj, path):
    val = b.field(obj, "uid", path)
    if not (isinstance(val, tuple) and len(val) == 2
            and (val[1] is None or isinstance(val[1], Name))):
        raise SpecDecodeError(f"field 'uid' of {obj.get('__type__')} should be a UID", path,
                              node_type=obj.get("__type__"), field_name="uid")
    return val


_INTEGERS: dict[int, sympy.Integer] = {}


@decoder("Integer")
def integer(b, obj, path):
    v = obj.get("_value")
    if v.__class__ is not int:
        v = b.raw(obj, "_value", path, int)  # raises, naming the field
    hit = _INTEGERS.get(v)
    if hit is None:
        if v.bit_length() > MAX_BITS:
            raise SpecDecodeError(f"integer literal of about {v.bit_length() * 3 // 10} digits "
                                  f"is too large (at most {MAX_BITS} bits)", f"{path}._value",
                                  node_type="Integer", field_name="_value")
        hit = sympy.Integer(v)
        if len(_INTEGERS) < 4096:
            _INTEGERS[v] = hit
    return hit


@decoder("FreeNumeric")
def free_numeric(b, obj, path):
    uid_, name = uid_field(b, obj, path)
    return FreeNumeric(uid_, name, path)


def _parts(b, obj, path):
    parts = b.field(obj, "content", path)
    if not isinstance(parts, tuple) or not all(isinstance(p, sympy.Basic) for p in parts):
        raise SpecDecodeError(f"{obj['__type__']}.content must be a list of numerics", path,
                              node_type=obj["__type__"], field_name="content")
    return parts


@functools.lru_cache(maxsize=65536)
def _huge(e) -> bool:
    """Whether ``e`` holds an exact number past ``MAX_BITS`` bits, kept unevaluated (a power
    like ``3**(2**63)``, a product of long literals): sympy would compute it on contact."""
    if isinstance(e, sympy.Pow) and (power_bits(e.base, e.exp) or 0) > MAX_BITS:
        return True
    if isinstance(e, sympy.Mul) and sum(abs(int(a)).bit_length() for a in e.args
                                        if isinstance(a, sympy.Integer)) > MAX_BITS:
        return True
    return any(_huge(a) for a in e.args)


def _build(fn, *args):
    """``fn(*args)``, or left unevaluated when evaluating would build a huge number (a huge
    power, a product of long literals, or anything applied to such a value). Evaluating it
    later is refused by :func:`ir.numeric.bounded` (a typed error), never a hang."""
    args = tuple(sympy.sympify(a) for a in args)
    if any(_huge(a) for a in args):
        return fn(*args, evaluate=False)
    if fn is sympy.Pow and (power_bits(*args) or 0) > MAX_BITS:
        return fn(*args, evaluate=False)
    if fn is sympy.Mul and sum(abs(int(a)).bit_length() for a in args
                               if isinstance(a, sympy.Integer)) > MAX_BITS:
        return fn(*args, evaluate=False)
    return fn(*args)


@decoder("Addition")
def addition(b, obj, path):
    return _build(sympy.Add, *_parts(b, obj, path))


@decoder("Multiplication")
def multiplication(b, obj, path):
    return _build(sympy.Mul, *_parts(b, obj, path))


@decoder("Power")
def power(b, obj, path):
    """A power; a numeric one whose exact value would be huge (``3**(2**63)``) is kept
    unevaluated, so decoding stays cheap and binding reports it (see ``ir.env``)."""
    return _build(sympy.Pow, _num(b, obj, "base", path), _num(b, obj, "exponent", path))


@decoder("FreeInput")
def free_input(b, obj, path):
    return FREE_INPUT


@decoder("Constant")
def constant(b, obj, path):
    """A named mathematical constant (``symbol``); ``spec.terms_operators`` reads the nullary
    operator of the same ``__type__``."""
    sym = b.field(obj, "symbol", path, None)
    table = {"EULER": sympy.E, "PI": sympy.pi, "IMAGINARY_UNIT": sympy.I,
             "INFINITY": sympy.oo}
    if sym not in table:
        raise SpecDecodeError(f"unknown constant symbol {sym!r}", path, node_type="Constant",
                              field_name="symbol")
    return table[sym]


@decoder("Logarithm")
def logarithm(b, obj, path):
    base = _num(b, obj, "base", path)
    arg = _num(b, obj, "argument", path)
    if base == sympy.E:
        return _build(sympy.log, arg)
    return _build(sympy.Mul, _build(sympy.log, arg), _build(sympy.Pow, _build(sympy.log, base),
                                                             -1))


def _unary(fn):
    def dec(b, obj, path):
        return _build(fn, _num(b, obj, "argument", path))

    return dec


decoder("Sigmoid")(_unary(Sigmoid))
decoder("SquareRoot")(_unary(lambda a, evaluate=True: sympy.Pow(a, sympy.Rational(1, 2),
                                                                  evaluate=evaluate)))
decoder("AbsoluteValue")(_unary(sympy.Abs))
decoder("Sign")(_unary(sympy.sign))
decoder("IsPositive")(_unary(IsPositive))
_MINMAX: dict[tuple, sympy.Expr] = {}


def _max(*args):
    return _minmax(sympy.Max, args)


def _min(*args):
    return _minmax(sympy.Min, args)


def _minmax(fn, args):
    """``fn(*args)`` memoised: sympy's Max/Min simplify their arguments on construction, which
    costs milliseconds per symbolic call; specs repeat the same few formulas. The result is
    the very same expression ``fn(*args)`` gives."""
    key = (fn, tuple(sympy.sympify(a) for a in args))
    hit = _MINMAX.get(key)
    if hit is None:
        try:
            hit = fn(*key[1])
        except (ValueError, TypeError):  # arguments sympy cannot order (zoo, I): kept as
            hit = fn(*key[1], evaluate=False)  # written; evaluating them is refused later
        if len(_MINMAX) < 1024:
            _MINMAX[key] = hit
    return hit


decoder("RectifiedLinear")(_unary(lambda a, evaluate=True: _max(a, 0) if evaluate else
                                  sympy.Max(a, 0, evaluate=False)))
decoder("Conjugate")(_unary(sympy.conjugate))


@decoder("Clamp")
def clamp(b, obj, path):
    arg = _num(b, obj, "argument", path)
    lo = _num(b, obj, "lower", path, None)
    hi = _num(b, obj, "upper", path, None)
    lo = sympy.Integer(0) if lo is None else lo
    hi = sympy.Integer(1) if hi is None else hi
    return _build(lambda *a, evaluate=True: _min(_max(*a[:2]), a[2]) if evaluate else
                  sympy.Min(sympy.Max(*a[:2], evaluate=False), a[2], evaluate=False),
                  arg, lo, hi)


@decoder("LargerOf")
def larger_of(b, obj, path):
    return _build(lambda *a, evaluate=True: _max(*a) if evaluate else
                  sympy.Max(*a, evaluate=False),
                  _num(b, obj, "first", path), _num(b, obj, "second", path))
