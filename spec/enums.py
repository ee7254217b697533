"""Registered enum members and class objects (``{"__registered__": ...}``)."""
from __future__ import annotations

from ncdc.ir.arrays import WeaveMode
from ncdc.ir.datatypes import Encoding
from ncdc.ir.errors import SpecDecodeError
from ncdc.ir.operators import SelectionForm
from ncdc.ir.tags import BlockDrawing

CONSTANT_SYMBOLS = ("EULER", "PI", "IMAGINARY_UNIT", "INFINITY")
EXPONENT_PLACEMENTS = ("SUPERSCRIPT", "SUBSCRIPT")

ENUMS: dict[str, dict[str, object]] = {
    "WeaveMode": {m.name: m for m in WeaveMode},
    "Encoding": {m.name: m for m in Encoding},
    "SelectionForm": {m.name: m for m in SelectionForm},
    "BlockDrawing": {m.name: m for m in BlockDrawing},
    "ConstantSymbol": {n: n for n in CONSTANT_SYMBOLS},
    "ExponentPlacement": {n: n for n in EXPONENT_PLACEMENTS},
}


class RegisteredType(str):
    """A class object of pyncd (appears only as ``UID._type``)."""


def decode_registered(value: dict, path: str):
    kind = value.get("__registered__")
    if kind == "enum":
        enum_name, member = value.get("type"), value.get("name")
        members = ENUMS.get(enum_name) if isinstance(enum_name, str) else None
        if members is None:
            raise SpecDecodeError(f"unknown enum {enum_name!r}", path)
        if member not in members:
            raise SpecDecodeError(f"{enum_name} has no member {member!r} (known: "
                                  f"{', '.join(members)})", path)
        return members[member]
    if kind == "type":
        rep = value.get("repr")
        if not isinstance(rep, str):
            raise SpecDecodeError("a registered type needs a string repr", path)
        return RegisteredType(rep)
    raise SpecDecodeError(f"unknown __registered__ kind {kind!r}", path)
