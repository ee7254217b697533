"""Arrays the spec fixes but does not learn (docs/format.md §11.12): computed by rule where the spec
gives one (the Engram primes ``p_{k}``: consecutive primes summing to ``T_{k}``, as
``interpreter/fixed.py``), otherwise data only the user can supply (``E_cmp``, the hash
multipliers ``alpha``): zeros the module refuses to run on until they are loaded, or seeded
stand-ins with a warning when the module is constructed with ``stand_in=True`` (the policy of
``ncdc eval --stand-in``)."""
from __future__ import annotations

import re

from ncdc.ir.datatypes import Natural, strip

from .names import string_literal


def _norm(text: str) -> str:
    return re.sub(r"[{}\s\\]", "", text or "")


def prime_total(ctx, op):
    """The size symbol ``T_{k}`` the primes ``p_{k}`` must sum to, or None (not primes)."""
    name = getattr(op, "name", None)
    if name is None or name.body.strip() != "p":
        return None
    m = re.fullmatch(r"p_\{?([^{}]+)\}?", (op.label or "").strip())
    sub = _norm(m.group(1)) if m else ""
    for sym in sorted(ctx.gen.symbol_names, key=lambda s: s.uid):
        if _norm(sym.label) == f"T_{sub}":
            return sym
    return None


def natural_bound(ctx, datatype) -> str:
    """Code for the exclusive bound of a natural datatype (floored), for reset_parameters."""
    dt = strip(datatype)
    if not isinstance(dt, Natural):
        raise TypeError("not a natural datatype")
    return ctx.size_code(dt.max_value)


def user_data(ctx, base: str, role: str, shape: list[str], datatype, title: str) -> str:
    """A long buffer of user data: zeros until loaded, or stand-ins (see the module doc)."""
    ctx.use("fixed")
    odd = "alpha" in title
    bound = natural_bound(ctx, datatype)
    flag = ctx.cb.stand_in_flag(title)
    odd_arg = ", odd=True" if odd else ""

    def init(p):
        return f"fill_user_data({p}, {bound}, {string_literal(title)}, {flag}{odd_arg})"

    return ctx.param(base, role, shape, init, learned=False, dtype="torch.long")
