"""The ``auxiliary`` object of a viewer envelope: what the viewer shows beside the diagram.

Every part is optional (tsncd ``advanced_display/AuxiliaryInformation.ts``, filled by pyncd's
``websocket_transfer/auxiliary_information.py``):

* ``legend``: one row per axis (its LaTeX and text, the size it comes to, code names);
* ``blocks``: keyed by the uid of a block's tag, the title, description, formula and code
  references an inspection box shows;
* ``expansions``: keyed by the number of a ``Broadcasted`` in import order (see
  :func:`broadcast_paths`), the operator's definition written out as a diagram of its own:
  ``expansion`` is that diagram's document as a JSON string (any envelope
  :mod:`spec.envelope` opens), ``auxiliary`` its own auxiliary object.

Nothing here changes what the diagram computes; a malformed part is a
:class:`~ir.errors.SpecFormatError` at its path.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ncdc.ir.errors import SpecFormatError


@dataclass(frozen=True)
class BlockInfo:
    """What the viewer shows for the block whose tag has uid ``uid``."""

    uid: int
    title: str | None
    description: str | None
    formula: str | None
    references: tuple[tuple[str, str | None], ...]  # (label, url)


@dataclass(frozen=True)
class Expansion:
    """Operator occurrence ``key``'s definition: ``text`` is the expansion's own document."""

    key: int
    operator: str
    latex: str | None
    formula: str | None
    description: str | None
    text: str
    auxiliary: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"key": self.key, "operator": self.operator, "latex": self.latex,
                "formula": self.formula, "description": self.description,
                "document_chars": len(self.text)}


@dataclass(frozen=True)
class Auxiliary:
    legend: tuple[dict, ...] = ()
    blocks: dict[int, BlockInfo] = field(default_factory=dict)
    expansions: dict[int, Expansion] = field(default_factory=dict)


def _text(obj: dict, key: str, path: str, required: bool = False) -> str | None:
    v = obj.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, str):
        raise SpecFormatError(f"{key} is a string, not {type(v).__name__}", f"{path}.{key}")
    return v


def _object(v, path: str) -> dict:
    if not isinstance(v, dict):
        raise SpecFormatError(f"an object, not {type(v).__name__}", path)
    return v


def _part(obj: dict, key: str, empty):
    """``obj[key]``, or ``empty`` where it is absent or null."""
    v = obj.get(key)
    return empty if v is None else v


def _key(k: str, path: str) -> int:
    if not k.isdigit():
        raise SpecFormatError(f"key {k!r} is not a decimal number", path)
    return int(k)


def _references(obj: dict, path: str) -> tuple[tuple[str, str | None], ...]:
    refs = _part(obj, "references", [])
    if not isinstance(refs, list):
        raise SpecFormatError("references is a list", f"{path}.references")
    out = []
    for i, r in enumerate(refs):
        r = _object(r, f"{path}.references[{i}]")
        out.append((str(r.get("label", "")), r.get("url") if isinstance(r.get("url"), str)
                    else None))
    return tuple(out)


def read_auxiliary(raw: dict | None, path: str = "auxiliary") -> Auxiliary:
    """The parts of ``raw`` (``None``: an envelope without one)."""
    if raw is None:
        return Auxiliary()
    raw = _object(raw, path)
    legend = _part(raw, "legend", [])
    if not isinstance(legend, list) or not all(isinstance(r, dict) for r in legend):
        raise SpecFormatError("legend is a list of objects", f"{path}.legend")
    blocks = {}
    for k, v in _object(_part(raw, "blocks", {}), f"{path}.blocks").items():
        where = f"{path}.blocks.{k}"
        v = _object(v, where)
        blocks[_key(k, where)] = BlockInfo(_key(k, where), _text(v, "title", where),
                                           _text(v, "description", where),
                                           _text(v, "formula", where),
                                           _references(v, where))
    expansions = {}
    for k, v in _object(_part(raw, "expansions", {}),
                        f"{path}.expansions").items():
        where = f"{path}.expansions.{k}"
        v = _object(v, where)
        own = _part(v, "auxiliary", {})
        _object(own, f"{where}.auxiliary")
        expansions[_key(k, where)] = Expansion(
            _key(k, where), _text(v, "operator", where, True) or "", _text(v, "latex", where),
            _text(v, "formula", where), _text(v, "description", where),
            _text(v, "expansion", where, True) or "", own)
    return Auxiliary(tuple(legend), blocks, expansions)


def broadcast_paths(doc: dict) -> list[str]:
    """The JSON path of every ``Broadcasted`` of ``doc["data"]``, in the order tsncd's importer
    builds them, which is the number the expansions are keyed by (tsncd
    ``data_transfer/json.ts``, ``TermJSONConverter.to_term``; pyncd
    ``data_transfer/broadcast_occurrences.py``): depth first, fields in the order written, a
    ``Broadcasted`` counted on entry, a ``__ref__`` followed into the repository the first
    time it is met (its terms then have ``uid_repository.<id>`` paths) and not again."""
    repo = doc.get("uid_repository")
    repo = repo if isinstance(repo, dict) else {}
    seen: set[str] = set()
    out: list[str] = []
    stack: list[tuple[object, str]] = [(doc.get("data"), "data")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, list):
            stack.extend((value[i], f"{path}[{i}]") for i in reversed(range(len(value))))
            continue
        if not isinstance(value, dict):
            continue
        if "__ref__" in value:
            ref = str(value["__ref__"])
            if ref not in seen and ref in repo:
                seen.add(ref)
                stack.append((repo[ref], f"uid_repository.{ref}"))
            continue
        if value.get("__type__") == "Broadcasted":
            out.append(path)
        stack.extend((v, f"{path}.{k}") for k, v in reversed(list(value.items()))
                     if k != "__type__")
    return out


__all__ = ["Auxiliary", "BlockInfo", "Expansion", "broadcast_paths", "read_auxiliary"]
