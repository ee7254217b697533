"""Binding sizes and constants: presets, user overrides, defaults from name exponents.

A binding names a symbol by id (``123`` or ``id:123``), by ``code_form`` (``hidden_width`` or
``hidden_width_size``) or by label (``m``, ``\\hat{v}``, ``T_1``). A label shared by several
symbols binds all of them (the seed's two ``v`` are both the vocabulary size). Presets live in
``spec/presets/*.json``; the free constants (epsilons, bases, ...) and their sources in
``spec/presets/constants.json``.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources

from ncdc.ir.env import Env, number_value
from ncdc.ir.errors import BindingError, UsageError
from ncdc.ir.names import plain_title
from ncdc.ir.numeric import INT64_MAX, FreeNumeric

PRESETS = ("released", "tiny", "medium")


def _read(name: str) -> dict:
    try:
        text = resources.files("ncdc.spec").joinpath("presets", f"{name}.json").read_text("utf-8")
    except FileNotFoundError:
        raise BindingError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})") from None
    return json.loads(text)


def _norm(label: str) -> str:
    return plain_title(label).replace(" ", "").replace("{", "").replace("}", "")


def match(symbols: Iterable[FreeNumeric], key: str) -> list[FreeNumeric]:
    """Symbols a user-given key names (id, code_form, or label)."""
    syms = list(symbols)
    k = key.strip()
    k = k.removeprefix("id:")
    if k.lstrip("-").isdigit():
        return [s for s in syms if s.uid == int(k)]
    hits = [s for s in syms if s.code_form and (s.code_form == k or s.code_form == k + "_size"
                                                or s.code_form.removesuffix("_size") == k)]
    if hits:
        return hits
    nk = _norm(k)
    return [s for s in syms if _norm(s.label) == nk or _norm(s.display.latex if s.display
                                                              else "") == nk]


@dataclass
class Binding:
    """The resolved values and where each came from (for reports)."""

    env: Env
    sources: dict[FreeNumeric, str] = field(default_factory=dict)
    unbound: list[FreeNumeric] = field(default_factory=list)


def bind(symbols: Iterable[FreeNumeric], preset: str | None = "released",
         sizes: Mapping[str, object] | None = None,
         constants: Mapping[str, object] | None = None) -> Binding:
    """Values for ``symbols``: constants file, then the preset (or name exponents for
    ``released``), then the user's ``sizes`` and ``constants`` (which win). Unknown user keys
    are a :class:`BindingError`."""
    syms = sorted(set(symbols), key=lambda s: s.uid)
    values: dict[FreeNumeric, object] = {}
    sources: dict[FreeNumeric, str] = {}

    def put(entries, origin):
        for e in entries:
            hits = [s for s in syms if s.uid == e.get("id")]
            if not hits and "name" in e and "id" not in e:
                hits = match(syms, e["name"])
            for s in hits:
                values[s] = e["value"]
                sources[s] = origin + (f" ({e['source']})" if "source" in e else "")

    put(_read("constants")["constants"], "constants file")
    if preset is not None:
        data = _read(preset)
        if data.get("from_exponents"):
            for s in syms:
                if s.default is not None:
                    values[s] = s.default
                    sources[s] = "stated in the spec (name exponent)"
        else:
            for s in syms:
                if s not in values and "generic_default" in data and _is_size_like(s):
                    values[s] = data["generic_default"]
                    sources[s] = f"{preset} preset (generic default)"
        put(data.get("sizes", []), f"{preset} preset")
        put(data.get("constants", []), f"{preset} preset")
    for origin, given in (("--size", sizes or {}), ("--constant", constants or {})):
        for key, val in given.items():
            hits = match(syms, key)
            if not hits:
                known = ", ".join(sorted({s.label for s in syms})[:40])
                raise UsageError(f"{origin} {key}: no symbol of this spec is named {key!r} "
                                   f"(known: {known})")
            val = given_value(origin, key, val)
            for s in hits:
                values[s] = val
                sources[s] = f"given ({origin} {key})"
    unbound = [s for s in syms if s not in values]
    checked = {s: number_value(v, f"{s.label} ({sources.get(s, 'bound')})")
               for s, v in values.items()}
    return Binding(Env(checked), sources, unbound)


def given_value(origin: str, key: str, val):
    """A user-given value checked where it is bound: ``--size`` a whole number in
    ``0..2**63-1``, ``--constant`` a finite number; else a :class:`BindingError` naming the
    flag (a :class:`UsageError`)."""
    try:
        v = number_value(val, f"{origin} {key}")
    except BindingError as exc:
        raise UsageError(exc.message) from None
    if origin == "--size" and not (v.is_Integer and 0 <= int(v) <= INT64_MAX):
        raise UsageError(f"{origin} {key}={val!r}: a size is a whole number from 0 to "
                         "2**63 - 1")
    return v


def _is_size_like(sym: FreeNumeric) -> bool:
    """Constants (epsilons, bases) are never given a generic size default."""
    return True
