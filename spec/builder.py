"""The decoding machinery: references with identity kept, typed field access, truncation.

A :class:`Builder` turns JSON values into IR terms through the decoder functions registered by
``__type__`` (see :mod:`spec.terms`). Repository records are decoded once and memoised by id, so
identity is preserved. Every failure is a :class:`~ir.errors.SpecDecodeError` naming the type,
the field and the JSON path. In salvage mode, values the file lost to truncation
(:class:`spec.jsontext.Incomplete`) become explicit :class:`~ir.Truncated` morphisms.
"""
from __future__ import annotations

from collections.abc import Callable

from ncdc.ir.errors import SpecDecodeError
from ncdc.ir.morphisms import Truncated

from .enums import decode_registered
from .jsontext import Incomplete

DECODERS: dict[str, Callable] = {}
"""``__type__`` -> decoder(builder, obj, path)."""

MORPHISM_TYPES: set[str] = set()
MAX_DEPTH = 600


def decoder(*type_names: str, morphism: bool = False):
    """Register a decoder function for one or more ``__type__`` names."""

    def wrap(fn):
        for t in type_names:
            DECODERS[t] = fn
            if morphism:
                MORPHISM_TYPES.add(t)
        return fn

    return wrap


class ConsequenceError(SpecDecodeError):
    """A failure caused by another one already reported (a reference to a record that does
    not decode): stands in for the term but is not listed again."""


class Builder:
    def __init__(self, repository: dict, salvage: bool = False):
        if not isinstance(repository, dict):
            raise SpecDecodeError("uid_repository must be an object", "uid_repository")
        self.repo = repository
        self.salvage = salvage
        self.cache: dict[int, object] = {}
        self.in_progress: set[int] = set()
        self.depth = 0
        self.truncated: list[Truncated] = []
        self.problems: list[SpecDecodeError] = []
        self.failed: set[int] = set()
        self.titles: list[str] = []
        """Titles of the blocks being decoded (for the locations of problems)."""
        """Decode problems inside morphisms, collected instead of raised (see ``typed``)."""

    # ------------------------------------------------------------------ values
    def term(self, value, path: str, expect: str | None = None):
        """Decode any JSON value: a ref, a typed object, an enum, a list or a scalar."""
        cls = value.__class__
        if cls is not dict:  # (an object, the usual case, goes straight through)
            if cls is str or cls is int or cls is float or cls is bool or value is None:
                return value
            if cls is Incomplete:
                return self.incomplete(value, path)
            if isinstance(value, list):
                return self._items(value, path, expect)
            if not isinstance(value, dict):
                return value
        if "__ref__" in value:
            return self.ref(value, path)
        if "__registered__" in value:
            return self.registered(value, path)
        if "__type__" in value:
            return self.typed(value, path)
        raise SpecDecodeError("an object without __type__, __ref__ or __registered__",
                              path, node_type=expect)

    def _items(self, value: list, path: str, expect: str | None):
        """``term`` of a list: its items' terms (a decoded record straight from the cache,
        without the item's path)."""
        term, cache, out = self.term, self.cache, []
        for i, v in enumerate(value):
            if v.__class__ is dict:
                rid = v.get("__ref__")
                if rid.__class__ is int:
                    hit = cache.get(rid, _MISSING)
                    if hit is not _MISSING:
                        out.append(hit)
                        continue
            out.append(term(v, f"{path}[{i}]", expect))
        return tuple(out)

    def typed(self, obj: dict, path: str):
        t = obj.get("__type__")
        if not isinstance(t, str):
            raise SpecDecodeError("__type__ must be a string", path)
        fn = DECODERS.get(t)
        if fn is None:
            raise SpecDecodeError(f"unknown __type__ {t!r}", path, node_type=t)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise SpecDecodeError(f"terms nested deeper than {MAX_DEPTH} levels", path,
                                      node_type=t)
            return fn(self, obj, path)
        except SpecDecodeError as exc:
            if t not in MORPHISM_TYPES:
                raise
            if isinstance(exc, ConsequenceError):  # its cause is reported where it arose
                return Truncated(t, {}, f"invalid: {exc.message}", path=path)
            # record it and stand a placeholder in for the morphism, so that its siblings
            # are decoded too and every problem is reported in one pass
            if not exc.titles:
                exc.titles = tuple(self.titles)
                exc.args = (str(exc),)
            self.problems.append(exc)
            return Truncated(t, {}, f"invalid: {exc.message}", path=path)
        finally:
            self.depth -= 1

    def ref(self, value: dict, path: str):
        rid = value.get("__ref__")
        if rid.__class__ is int:  # (the usual case: a record already decoded)
            hit = self.cache.get(rid, _MISSING)
            if hit is not _MISSING:
                return hit
        if not isinstance(rid, int) or isinstance(rid, bool):
            raise SpecDecodeError(f"__ref__ must be an integer, not {rid!r}", path)
        if rid in self.cache:
            return self.cache[rid]
        if rid in self.failed:
            raise ConsequenceError(f"reference to record {rid}, which does not decode", path)
        key = str(rid)
        if key not in self.repo:
            raise SpecDecodeError(f"reference to {rid}, which is not in uid_repository", path)
        if rid in self.in_progress:
            raise SpecDecodeError(f"reference cycle through record {rid}", path)
        record = self.repo[key]
        if isinstance(record, Incomplete):
            raise SpecDecodeError(f"record {rid} was cut off by truncation", path)
        self.in_progress.add(rid)
        try:
            out = self.term(record, f"uid_repository.{key}")
        except SpecDecodeError:
            self.failed.add(rid)
            raise
        finally:
            self.in_progress.discard(rid)
        self.cache[rid] = out
        return out

    def registered(self, value: dict, path: str):
        """An enum member or class object. Decoded values are memoised by their (string)
        fields: there are few distinct ones and thousands of uses."""
        get = value.get
        key = (get("__registered__"), get("type"), get("name"), get("repr"))
        try:  # the memo's keys hold only strings and None: nothing else equals one
            hit = _REGISTERED.get(key)
        except TypeError:  # an unhashable field: the checks below name it
            hit = None
        if hit is not None:
            return hit

        for name in ("__registered__", "type", "name", "repr"):
            if name in value and not isinstance(value[name], str):
                raise SpecDecodeError(f"field {name!r} of a registered value must be a string",
                                      f"{path}.{name}", field_name=name)
        out = decode_registered(value, path)
        if len(value) == sum(k is not None for k in key):  # no other fields: safe to reuse
            _REGISTERED[key] = out
        return out

    # ------------------------------------------------------------------ fields
    def field(self, obj: dict, name: str, path: str, default=..., kind: str | None = None):
        """The decoded field ``name`` of ``obj``; missing -> SpecDecodeError unless a
        default is given."""
        value = obj.get(name, _MISSING)
        if value is _MISSING:
            if default is not ...:
                return default
            raise SpecDecodeError(f"{obj.get('__type__')} lacks field {name!r}", path,
                                  node_type=obj.get("__type__"), field_name=name)
        # (what ``term`` gives at once, without the field's path: a scalar, a decoded record)
        cls = value.__class__
        if cls is str or cls is int or cls is float or cls is bool or value is None:
            return value
        if cls is dict:
            rid = value.get("__ref__")
            if rid.__class__ is int:
                hit = self.cache.get(rid, _MISSING)
                if hit is not _MISSING:
                    return hit
        return self.term(value, f"{path}.{name}", kind)

    def raw(self, obj: dict, name: str, path: str, types, default=...):
        """A plain JSON field checked against ``types``."""
        if name not in obj:
            if default is not ...:
                return default
            raise SpecDecodeError(f"{obj.get('__type__')} lacks field {name!r}", path,
                                  node_type=obj.get("__type__"), field_name=name)
        val = obj[name]
        if not isinstance(val, types) or (isinstance(val, bool) and bool not in _tuple(types)):
            raise SpecDecodeError(f"field {name!r} of {obj.get('__type__')} has the wrong type "
                                  f"({type(val).__name__})", f"{path}.{name}",
                                  node_type=obj.get("__type__"), field_name=name)
        return val

    def check(self, value, cls, obj: dict, name: str, path: str, allow_none: bool = False):
        """Assert a decoded field is an instance of ``cls``."""
        if value is None and allow_none:
            return value
        if not isinstance(value, cls):
            got = type(value).__name__
            want = cls.__name__ if isinstance(cls, type) else "/".join(c.__name__ for c in cls)
            raise SpecDecodeError(f"field {name!r} of {obj.get('__type__')} should be {want}, "
                                  f"got {got}", f"{path}.{name}", node_type=obj.get("__type__"),
                                  field_name=name)
        return value

    # ------------------------------------------------------------------ truncation
    def incomplete(self, inc: Incomplete, path: str):
        """A value the truncation cut: a Truncated morphism (salvage) or an error (strict)."""
        if not self.salvage:
            raise SpecDecodeError("value cut off by truncation", path)
        if inc.kind == "array":
            items = []
            for i, v in enumerate(inc.partial or []):
                try:
                    items.append(self.term(v, f"{path}[{i}]"))
                except SpecDecodeError:
                    if isinstance(v, Incomplete):
                        items.append(self._truncated(None, {}, f"{path}[{i}]", "cut"))
                    else:
                        raise
            return tuple(items)
        if inc.kind != "object":
            return self._truncated(None, {}, path, f"{inc.kind} cut off")
        partial = inc.partial if isinstance(inc.partial, dict) else {}
        t = partial.get("__type__") if isinstance(partial.get("__type__"), str) else None
        fields = {}
        for key, val in partial.items():
            if key == "__type__":
                continue
            try:
                fields[key] = self.term(val, f"{path}.{key}")
            except SpecDecodeError as exc:
                fields[key] = self._truncated(None, {}, f"{path}.{key}", str(exc.message))
        return self._truncated(t, fields, path, "cut off by the end of the file")

    def _truncated(self, t, fields, path, reason):
        node = Truncated(t, fields, reason, path=path)
        self.truncated.append(node)
        return node


_MISSING = object()

_REGISTERED: dict[tuple, object] = {}
"""Memo of decoded registered values (enum members and class names are immutable)."""


def _tuple(types):
    return types if isinstance(types, tuple) else (types,)

