"""Contractions: einsum-like products, held weights, table lookups."""
from __future__ import annotations

from dataclasses import dataclass

from .base import Operator


@dataclass(frozen=True, eq=False)
class Einops(Operator):
    """``out = sum over groups of prod_k in_k``; ``signature[k]`` gives one group number per
    target position of input k; every group is summed; the one output is all degree."""

    signature: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, eq=False)
class Linear(Operator):
    """``y[o] = sum_in x[in] W[in, o] (+ b[o])``; with no input the output is ``W`` itself."""

    bias: bool = False


@dataclass(frozen=True, eq=False)
class Embedding(Operator):
    """``out[o] = T[idx, o]`` for a rank-0 natural index below the input's bound."""
