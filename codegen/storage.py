"""Which generated parameters a storage policy holds in a storage format (``--weights``).

A policy (anything with ``format_for(key)``, e.g. ``interpreter.storage_policy.StoragePolicy``)
names formats by the interpreter's parameter keys; a generated class is built once for every
block it serves, so the format of a class member is looked up by its IR site and role. Every
key the site stands for must get the same format; :func:`verify` checks the built module against
the policy key by key. The stored layout and the dequantization live in ``prelude/storage.py``.
"""
from __future__ import annotations

from ncdc.ir.datatypes import kind
from ncdc.ir.errors import SpecError


def _format(policy, spec) -> str | None:
    if policy is None or not spec.learned or kind(spec.datatype) != "real":
        return None
    return policy.format_for(spec.key)


class MemberFormats:
    """``(site, role) -> format or None`` for the members of the classes generated for a
    morphism whose parameters are ``specs`` (:func:`ir.params.param_specs`) under ``policy``."""

    def __init__(self, specs, policy, key_of):
        self.policy = policy
        self.key_of = key_of
        self.by_id: dict = {}
        self.by_key: dict = {}
        self.any = False
        if policy is None or not getattr(policy, "rules", True):
            return
        for spec in specs:
            fmt = _format(policy, spec)
            self.any |= fmt is not None
            self.by_id.setdefault((id(spec.site), spec.role), {}).setdefault(fmt, spec.key)
            self.by_key.setdefault((key_of(spec.site), spec.role), {}).setdefault(fmt, spec.key)

    def __call__(self, site, role) -> str | None:
        if not self.any:
            return None
        found = self.by_id.get((id(site), role)) or self.by_key.get((self.key_of(site), role))
        if not found:
            return None
        if len(found) > 1:
            (f1, k1), (f2, k2) = list(found.items())[:2]
            raise SpecError(f"the storage policy holds {k1} as {f1 or 'float'} but {k2} as "
                            f"{f2 or 'float'}; the generated code builds them as one member "
                            "(of one class), so give them the same format", getattr(site, "path", ""))
        return next(iter(found))


def verify(policy, keys: dict[str, str], formats: dict[str, str | None], specs) -> None:
    """Every generated member holds the format the policy gives its key (``keys``: state_dict
    name -> key; ``formats``: name -> the format built)."""
    if policy is None:
        return
    by_key = {s.key: s for s in specs}
    for name, key in keys.items():
        want = _format(policy, by_key[key])
        got = formats.get(name)
        if want != got:
            raise SpecError(f"the storage policy holds {key} as {want or 'float'}, but the "
                            f"generated member {name} is {got or 'float'}: its class serves "
                            "blocks the policy treats differently; give them the same format")


def stored_loader(loader: str) -> str:
    """The generated ``load_interpreter_params`` for a file holding StoredWeights: a stored
    member (a submodule, not a state_dict entry) encodes the value it is given."""
    for old, new in (
            ("            target = state[name]\n",
             "            target = state[name] if name in state else module.get_submodule(name)\n"),
            ("            target.copy_(value.to(target.dtype))\n",
             ("            if isinstance(target, StoredWeight):  # encoded in its storage format\n"
             "                target.encode_(value)\n"
             "            else:\n"
             "                target.copy_(value.to(target.dtype))\n"))):
        if loader.count(old) != 1:
            raise AssertionError(f"internal: the loader has no single line {old.strip()!r}")
        loader = loader.replace(old, new)
    return loader


__all__ = ["MemberFormats", "stored_loader", "verify"]
