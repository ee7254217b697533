"""A checkpoint seen through a map: tensors keyed by ncdc parameter keys, in the interpreter's
layout, delivered piece by piece (one per stacked tensor) so a stacked family never exists
twice in memory.

Every tensor of the checkpoint is accounted for when the source is opened: matched by a rule,
the block scale of a matched weight, or ignored by the map; the others (unmapped), and every
clash (two tensors for one key, two for one stack index), are reported together in one
:class:`CheckpointError`.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from . import transforms as tf
from .errors import CheckpointError, listing
from .mapping import CheckpointMap, Rule, expand, stack_index, tensor_name


@dataclass(frozen=True)
class Entry:
    """One checkpoint tensor's contribution to a key: part ``part`` of a split (else 0), at
    ``index`` of the stack axis (else None), with its block scale tensor (or None) and the
    tensor it is multiplied by (or None)."""

    tensor: str
    rule: Rule
    part: int = 0
    index: int | None = None
    scale: str | None = None
    factor: str | None = None


class MappedSource:
    """The tensors of ``files`` (:class:`ncdc.checkpoint.files.TensorFiles`) renamed and
    transformed by ``cmap``. ``dtype``: the torch dtype dequantized weights are produced in."""

    def __init__(self, files, cmap: CheckpointMap, dtype=None):
        import torch

        self.files, self.map = files, cmap
        self.dtype = dtype or torch.float32
        self.metadata = getattr(files, "metadata", {})
        self.plan: dict[str, list[Entry]] = defaultdict(list)
        names = list(files.names())
        matches, scales = self._matches(names)
        problems, unmapped = [], []
        factors = self._factors(matches, problems)
        used = set(factors.values())
        for name in names:
            if (name in scales or name in used) and name not in matches:
                continue
            if name not in matches:
                if not cmap.ignored(name):
                    unmapped.append(name)
                continue
            rule, m, scale = matches[name]
            index, what = None, f"tensor {name!r} ({rule.label})"
            scheme = cmap.scheme(rule)
            if scale is None and scheme is not None and scheme.codes == "e2m1":
                problems.append(f"{what}: FP4 codes need their scale tensor "
                                f"{tensor_name(scheme.scale, m, what)!r}, which the checkpoint "
                                "lacks")
            if rule.stack is not None:
                index = stack_index(m, rule.stack.index, what)
            for part, key in enumerate(rule.keys()):
                self.plan[expand(key, m, what)].append(
                    Entry(name, rule, part, index, scale, factors.get(name)))
        for key, entries in self.plan.items():
            if any(e.index is None for e in entries) and len(entries) > 1:
                problems.append(f"key {key!r} gets {len(entries)} tensors "
                                f"({listing(e.tensor for e in entries)}) from "
                                f"{entries[0].rule.label}; stack them or map one")
            seen = {}
            for e in entries:
                if e.index is not None and e.index in seen:
                    problems.append(f"key {key!r} index {e.index} gets both {seen[e.index]!r} "
                                    f"and {e.tensor!r} ({e.rule.label})")
                seen.setdefault(e.index, e.tensor)
        if unmapped:
            problems.insert(0, f"{len(unmapped)} checkpoint tensor(s) match no rule of "
                               f"{cmap.path!r} and no 'ignore' pattern: {listing(unmapped)}")
        if problems:
            raise CheckpointError(f"checkpoint {files.path!r} through map {cmap.path!r}: "
                                  + "; ".join(problems))
        for entries in self.plan.values():
            entries.sort(key=lambda e: (e.index is None, e.index or 0, e.tensor))

    def _factors(self, matches: dict, problems: list[str]) -> dict[str, str]:
        """tensor -> the tensor its rule multiplies it by, for the rules with ``multiply``;
        a factor the checkpoint lacks is a problem."""
        factors = {}
        for name, (rule, m, _scale) in matches.items():
            if rule.multiply is not None:
                what = f"tensor {name!r} ({rule.label}): multiply"
                factors[name] = other = tensor_name(rule.multiply.tensor, m, what)
                if other not in self.files:
                    problems.append(f"{what} names {other!r}, which the checkpoint lacks")
        return factors

    def _matches(self, names: list[str]) -> tuple[dict, set[str]]:
        """(tensor -> (rule, match, its block scale tensor or None) for the tensors a rule
        matches, the names of those scale tensors); a scale counts only when it is present."""
        present = set(names)
        matches, scales = {}, set()
        for name in names:
            hit = self.map.match(name)
            if hit is None:
                continue
            rule, m = hit
            scheme = self.map.scheme(rule)
            scale = None if scheme is None else \
                tensor_name(scheme.scale, m, f"tensor {name!r} ({rule.label}): scale")
            if scale is not None and scale in present:
                scales.add(scale)
            else:
                scale = None
            matches[name] = (rule, m, scale)
        return matches, scales

    # ------------------------------------------------------------------ source protocol

    def names(self) -> list[str]:
        return list(self.plan)

    def __contains__(self, key) -> bool:
        return key in self.plan

    def expect(self, keys) -> None:
        raw = []
        for k in keys:
            for e in self.plan.get(k, ()):
                raw.append(e.tensor)
                raw.extend(n for n in (e.scale, e.factor) if n)
        self.files.expect(raw)

    def close(self) -> None:
        self.files.close()

    def describe(self, key) -> str:
        entries = self.plan.get(key, ())
        if not entries:
            return f"key {key!r}"
        first = entries[0]
        more = f" and {len(entries) - 1} more" if len(entries) > 1 else ""
        return f"tensor {first.tensor!r}{more} ({first.rule.label})"

    def _value(self, e: Entry, key: str, shape):
        """The tensor ``e`` gives ``key``, transformed and shaped as ``shape``."""
        what = f"{key}: tensor {e.tensor!r} ({e.rule.label})"
        t = self.files.get(e.tensor)
        if e.scale is not None:
            scheme = self.map.scheme(e.rule)
            t = tf.dequantize(t, self.files.get(e.scale), scheme.block, self.dtype, what,
                              codes=scheme.codes)
        if e.rule.split is not None:
            s = e.rule.split
            t = tf.split(t, s.axis, s.sizes, len(s.keys), what)[e.part]
        if e.factor is not None:
            index = e.rule.multiply.index
            t = tf.multiply(t, self.files.get(e.factor), None if index is None
                            else index[e.part], self.dtype, what)
        if e.rule.permute is not None:
            t = tf.permute(t, e.rule.permute, what)
        if e.rule.dtype is not None:
            t = tf.cast(t, e.rule.dtype)
        return tf.reshape(t, shape, what)

    def pieces(self, key: str, shape, part=None):
        """``(index, tensor)`` pairs filling an array of ``shape`` (the interpreter's) for
        ``key``: one whole piece, or one per stacked tensor (its slice along the stack axis).
        ``part``: ``(n, lo, hi)``, the slice ``[lo, hi)`` of an expert axis of length ``n``
        a rank holds; a family stacked along an axis of that length yields (and reads) only
        the tensors of that slice."""
        entries = self.plan[key]
        stack = entries[0].rule.stack
        if stack is None:
            yield (), self._value(entries[0], key, shape)
            return
        axis = stack.axis if stack.axis >= 0 else len(shape) + stack.axis
        if not 0 <= axis < len(shape):
            raise CheckpointError(f"{key}: stack axis {stack.axis} of a {len(shape)}-axis "
                                  f"array ({entries[0].rule.label})")
        n = shape[axis]
        found = {e.index for e in entries}
        lacking = [i for i in range(n) if i not in found]
        extra = sorted(i for i in found if not 0 <= i < n)
        if lacking or extra:
            raise CheckpointError(
                f"{key}: {entries[0].rule.label} stacks {len(found)} tensor(s) along axis "
                f"{axis} of length {n}" + (f"; missing indices {listing(lacking)}" if lacking
                                           else "")
                + (f"; indices out of range {listing(extra)}" if extra else ""))
        piece_shape = tuple(shape[:axis]) + tuple(shape[axis + 1:])
        for e in entries:
            if part is not None and part[0] == n and not part[1] <= e.index < part[2]:
                continue
            yield (slice(None),) * axis + (e.index,), self._value(e, key, piece_shape)

    def get(self, key: str, shape):
        """The whole array of ``key`` in ``shape`` (the pieces assembled)."""
        import torch

        out = None
        for index, piece in self.pieces(key, tuple(shape)):
            if index == ():
                return piece
            if out is None:
                out = torch.empty(tuple(shape), dtype=piece.dtype)
            out[index] = piece
        return out


__all__ = ["Entry", "MappedSource"]
