"""A faster constructor for the IR's frozen dataclasses.

``dataclass(frozen=True)`` writes each field through ``object.__setattr__`` (the class's own
``__setattr__`` refuses), a C call per field; the loader builds ~10^4 IR objects, so that is a
measurable share of loading. :func:`quick_init` replaces the generated ``__init__`` with one of
the same signature (positional and keyword-only fields, defaults, default factories) that
stores the fields in the instance's ``__dict__`` directly. Instances stay immutable: assigning
or deleting an attribute still raises ``FrozenInstanceError``; equality, hashing, ``repr``,
``dataclasses.replace`` and a :class:`cached_property` (the lock-free one below) work as
with the dataclass.

A class that writes its own ``__init__``, has a ``__post_init__``, ``__slots__`` or init-only
variables keeps the dataclass's constructor (``quick_init`` returns it unchanged).
"""
from __future__ import annotations

import dataclasses

_MISSING = dataclasses.MISSING


def quick_init(cls):
    """Give the frozen dataclass ``cls`` an ``__init__`` that fills ``__dict__`` at once."""
    params = cls.__dict__.get("__dataclass_params__")
    init = cls.__dict__.get("__init__")
    if (params is None or not params.frozen or not params.init or init is None
            or getattr(init, "__code__", None) is None or init.__code__.co_filename != "<string>"
            or hasattr(cls, "__post_init__") or "__slots__" in cls.__dict__):
        return cls
    every = cls.__dataclass_fields__.values()
    if any(f._field_type is dataclasses._FIELD_INITVAR for f in every):
        return cls
    fields = [f for f in every if f._field_type is dataclasses._FIELD]
    if any(f.name.startswith("_quick_") or f.name in ("self", "d") for f in fields):
        return cls
    env: dict[str, object] = {"_HAS_FACTORY": _HAS_FACTORY}
    positional, keyword, body = [], [], []
    for f in fields:
        default, factory = f"_quick_default_{f.name}", f"_quick_factory_{f.name}"
        if f.default is not _MISSING:
            env[default] = f.default
        elif f.default_factory is not _MISSING:
            env[factory] = f.default_factory
        if not f.init:
            if f.default is not _MISSING:
                body.append(f"    d[{f.name!r}] = {default}")
            elif f.default_factory is not _MISSING:
                body.append(f"    d[{f.name!r}] = {factory}()")
            continue
        if f.default is not _MISSING:
            spec = f"{f.name}={default}"
        elif f.default_factory is not _MISSING:
            spec = f"{f.name}=_HAS_FACTORY"
            body.append(f"    if {f.name} is _HAS_FACTORY: {f.name} = {factory}()")
        else:
            spec = f.name
        (keyword if f.kw_only else positional).append(spec)
        body.append(f"    d[{f.name!r}] = {f.name}")
    args = ", ".join(["self", *positional] + (["*", *keyword] if keyword else []))
    src = f"def __init__({args}):\n    d = self.__dict__\n" + "\n".join(body) + "\n"
    exec(src, env)  # noqa: S102 - source built above from the field names
    fn = env["__init__"]
    fn.__qualname__ = f"{cls.__qualname__}.__init__"
    fn.__module__ = cls.__module__
    fn.__doc__ = init.__doc__
    fn.__annotations__ = dict(getattr(init, "__annotations__", {}))
    cls.__init__ = fn
    return cls


class _HasFactory:
    def __repr__(self):
        return "<factory>"


_HAS_FACTORY = _HasFactory()


class cached_property:  # noqa: N801 - named as the functools decorator it stands in for
    """``functools.cached_property`` without its lock (as Python 3.12 has it): computed on the
    first access, stored in the instance's ``__dict__``, from where later accesses read it
    without calling the descriptor. The IR's frozen terms compute each dom, cod and shape
    view so, once; Python 3.11's version takes a reentrant lock on every first access, a
    measurable share of validating a spec. What the function raises propagates, and nothing
    is stored."""

    def __init__(self, func) -> None:
        self.func = func
        self.attrname: str | None = None
        self.__doc__ = func.__doc__
        self.__module__ = func.__module__

    def __set_name__(self, owner, name: str) -> None:
        if self.attrname is None:
            self.attrname = name
        elif name != self.attrname:
            raise TypeError("cannot assign the same cached_property to two different names "
                            f"({self.attrname!r} and {name!r})")

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        if self.attrname is None:
            raise TypeError("cannot use a cached_property without calling __set_name__ on it")
        value = self.func(instance)
        instance.__dict__[self.attrname] = value
        return value
