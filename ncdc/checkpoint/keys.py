"""Parameter keys from any root: a block's keys found in a file keyed from an enclosing block
or the whole model.

A block's parameter keys start at its own title (``Routed Experts/W^{G}.weight``); the same
arrays in a whole-model file carry the path of titles down to it (``Sliding Window Layer/
Single-Pass mHC~1/Mixture of Experts/Routed Experts/W^{G}.weight``). The prefix is found by
identity: a block key and a whole-model key name the same array when they come from the same
operator occurrence and role (``ir.params.param_specs``). A block inside a repeated block has one
prefix per iteration; the first is used unless one is given.
"""
from __future__ import annotations

from collections import defaultdict

from .errors import CheckpointError, listing


def _rest(key: str) -> str:
    """A block-rooted key without its first segment (the block's own title)."""
    _head, sep, rest = key.partition("/")
    return rest if sep else key


def prefixes(block_specs, model_specs) -> list[str]:
    """The key prefixes under which the arrays of ``block_specs`` occur in ``model_specs``
    (same operator occurrence and role), in model order."""
    where = defaultdict(list)
    for p in model_specs:
        where[(id(p.site), p.role)].append(p.key)
    found: list[str] = []
    for p in block_specs:
        rest = _rest(p.key)
        for k in where.get((id(p.site), p.role), ()):
            if k.endswith("/" + rest) and k[:-len(rest)] not in found:
                found.append(k[:-len(rest)])
        if found:
            break
    return found


def resolve(block_specs, names, model_specs=(), prefix: str | None = None) -> tuple[dict, str]:
    """``(block key -> name in the file, prefix used)``: each key as it is when the file holds
    it, else under the prefix of the enclosing model (``prefix``, or the first found by
    identity). Keys found neither way are left out (the loader lists them)."""
    names = set(names)
    keys = [p.key for p in block_specs]
    out = {k: k for k in keys if k in names} if prefix is None else {}
    if len(out) == len(keys) and prefix is None:
        return out, ""
    if callable(model_specs):
        model_specs = model_specs()
    options = prefixes(block_specs, model_specs) if model_specs else []
    if prefix is not None:
        if not prefix.endswith("/"):
            prefix += "/"
        if options and prefix not in options:
            raise CheckpointError(f"key prefix {prefix!r} does not lead to this block; "
                                  f"it occurs under {listing(options)}")
        chosen = prefix
    elif options:
        chosen = next((o for o in options if any(o + _rest(k) in names for k in keys)),
                      options[0])
    else:
        return out, ""
    for k in keys:
        if chosen + _rest(k) in names:
            out[k] = chosen + _rest(k)
    return out, chosen


__all__ = ["prefixes", "resolve"]
