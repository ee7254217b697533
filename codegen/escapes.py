"""Aborting the pairs form (``codegen/pairs.py``): where a pairs array reaches a use that needs
the dense array, the attempt is undone — :class:`NotCompact` makes the callee fall back to its
dense class, :class:`PairsEscape` makes the caller's class be rebuilt with that call dense."""
from __future__ import annotations

ARGUMENT = -1
"""The origin of a pairs array that comes from the class's own pairs argument."""


class NotCompact(Exception):
    """The block being generated in pairs mode cannot keep its sparse arrays as pairs arrays;
    its caller uses the dense class instead."""


class PairsEscape(Exception):
    """A pairs array made at these call sites reached a use that needs the dense array; the
    class is rebuilt with those calls dense."""

    def __init__(self, sites: frozenset, why: str):
        super().__init__(why)
        self.sites = frozenset(sites)


def escape(origins: frozenset, why: str):
    """Abort the pairs form of the arrays from ``origins``."""
    if ARGUMENT in origins or not origins:
        raise NotCompact(why)
    raise PairsEscape(origins, why)
