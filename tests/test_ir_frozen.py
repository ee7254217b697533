"""ir.frozen.quick_init: the IR's frozen dataclasses keep the dataclass's constructor signature
and immutability with the faster ``__init__``."""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import pickle
import pkgutil

import pytest

import ncdc.ir
from ncdc.ir.frozen import quick_init


def _frozen_ir_classes():
    out = []
    for info in pkgutil.walk_packages(ncdc.ir.__path__, "ncdc.ir."):
        mod = importlib.import_module(info.name)
        for v in vars(mod).values():
            if (isinstance(v, type) and v.__module__ == mod.__name__
                    and "__dataclass_params__" in v.__dict__ and v.__dataclass_params__.frozen):
                out.append(v)
    return out


def _expected_signature(cls) -> list[tuple]:
    """(name, kind, default) of each init field, as ``dataclasses`` documents its ``__init__``:
    fields in order, keyword-only ones after the others."""
    plain, keyword = [], []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        default = (f.default if f.default is not dataclasses.MISSING
                   else "<factory>" if f.default_factory is not dataclasses.MISSING
                   else inspect.Parameter.empty)
        (keyword if f.kw_only else plain).append(
            (f.name, "KEYWORD_ONLY" if f.kw_only else "POSITIONAL_OR_KEYWORD", default))
    return plain + keyword


def _signature(fn) -> list[tuple]:
    params = list(inspect.signature(fn).parameters.values())[1:]
    return [(p.name, p.kind.name, repr(p.default) if p.default is not inspect.Parameter.empty
             and repr(p.default) == "<factory>" else p.default) for p in params]


CLASSES = _frozen_ir_classes()


def test_every_frozen_ir_dataclass_has_the_quick_init():
    assert len(CLASSES) > 80
    slow = [c.__qualname__ for c in CLASSES
            if "__dict__" not in c.__dict__["__init__"].__code__.co_names]
    assert slow == []


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_signature_is_the_dataclass_one(cls):
    got = _signature(cls.__init__)
    want = _expected_signature(cls)
    assert [g[:2] for g in got] == [w[:2] for w in want]
    for (_n, _k, g), (_n2, _k2, w) in zip(got, want, strict=True):
        assert g is w or g == w


@quick_init
@dataclasses.dataclass(frozen=True)
class _Toy:
    a: int
    b: tuple = ()
    c: list = dataclasses.field(default_factory=list)
    d_: int = dataclasses.field(default=7, init=False)
    path: str = dataclasses.field(default="", kw_only=True)


def test_fields_defaults_factories_and_immutability():
    t = _Toy(1, path="p")
    assert (t.a, t.b, t.c, t.d_, t.path) == (1, (), [], 7, "p")
    assert _Toy(1).c is not _Toy(1).c  # a fresh default per instance
    assert _Toy(1, (2,), [3]) == _Toy(a=1, b=(2,), c=[3])
    assert repr(_Toy(1)) == "_Toy(a=1, b=(), c=[], d_=7, path='')"
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.a = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del t.a
    with pytest.raises(TypeError):
        _Toy()
    with pytest.raises(TypeError):
        _Toy(1, (), [], "p")  # path is keyword-only
    with pytest.raises(TypeError):
        _Toy(1, d_=3)  # not an init field
    assert dataclasses.replace(t, a=5) == _Toy(5, path="p")
    assert pickle.loads(pickle.dumps(t)) == t


def test_classes_it_does_not_touch():
    @dataclasses.dataclass(frozen=True)
    class Post:
        a: int

        def __post_init__(self):
            pass

    @dataclasses.dataclass
    class Mutable:
        a: int

    for cls in (Post, Mutable):
        init = cls.__init__
        assert quick_init(cls).__init__ is init


def test_cached_property_computes_once_and_keeps_no_failure():
    from ncdc.ir.frozen import cached_property

    calls = []

    @quick_init
    @dataclasses.dataclass(frozen=True)
    class Lazy:
        a: int

        @cached_property
        def double(self):
            calls.append(self.a)
            if self.a < 0:
                raise ValueError("negative")
            return 2 * self.a

    x = Lazy(3)
    assert (x.double, x.double, calls) == (6, 6, [3])
    assert x.__dict__["double"] == 6 and isinstance(Lazy.double, cached_property)
    y = Lazy(-1)
    for _ in range(2):
        with pytest.raises(ValueError):
            _ = y.double
    assert calls == [3, -1, -1] and "double" not in y.__dict__
    assert Lazy(3) == x  # a cached value is no field
