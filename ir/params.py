"""The arrays a spec needs but does not hold: learned parameters and fixed arrays.

Keys are per occurrence (docs/format.md §13.2): the titles of the enclosing blocks, relative to the
root being enumerated, joined by ``/``, then the operator's label and a role suffix::

    Sliding Window Layer/Single-Pass mHC/Mixing Coefficients/H_{0}.weight

A block title that occurs again under the same parent gets ``~k`` (k-th repeat, from 1); a block
repeated r > 1 times gets ``@i`` per iteration (parameters are per iteration); an operator label
that occurs again inside one block gets ``~k``. Keys are therefore readable, unique and depend
only on the spec's structure, so they are stable across runs and machines. The JSON path of the
operator is kept alongside.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from .datatypes import Datatype, kind
from .env import Env
from .errors import SpecError
from .frozen import quick_init
from .morphisms import Block, Broadcasted, Morphism, Truncated
from .operators import BlockOperator, ParaBlockOperator

MAX_REPETITION = 65536
"""Most iterations of one repeated block: parameters are kept per iteration (``title@i``), so
ncdc unrolls repetitions; a larger count is refused (``spec.checks_sizes``) before any work."""

ROLE_SUFFIX = {"weight": "weight", "bias": "bias", "gain": "gain", "shift": "shift",
               "table": "table", "fixed": "value"}


@quick_init
@dataclass(frozen=True)
class ParamSpec:
    """One array an occurrence of an operator needs."""

    key: str
    role: str  # weight | bias | gain | shift | table | fixed
    operator: object
    site: Broadcasted
    shape: tuple[sympy.Expr, ...]
    axis_labels: tuple[str, ...]
    datatype: Datatype
    learned: bool
    titles: tuple[str, ...]
    count: object = 1
    """How many arrays this row stands for: 1, or the repetition count (an int or a sympy
    expression) of the collapsed repeated blocks around it (``param_specs(collapse=...)``)."""

    @property
    def json_path(self) -> str:
        return self.site.path + ".operator"

    @property
    def value_kind(self) -> str:
        """'real', 'natural' or 'complex': what the array's elements are."""
        return kind(self.datatype)


def _label(op) -> str:
    if op.name is not None and op.name.text:
        return op.name.text
    return type(op).__name__


def param_roles(b: Broadcasted) -> list[tuple[str, tuple, tuple, Datatype, bool]]:
    """(role, shape, axis labels, datatype, learned) for each array ``b``'s operator needs (its
    ``param_arrays``, by the roles its class declares)."""
    return b.operator.param_arrays(b)


def param_specs(root: Morphism, env: Env | None = None, collapse: int | None = None
                ) -> list[ParamSpec]:
    """Every parameter occurrence below ``root``, in pre-order. ``env`` is needed only when a
    repeated block's repetition count is symbolic.

    With ``collapse``, a block repeating more than ``collapse`` times (or a number of times
    ``env`` leaves symbolic) is not unrolled: its body is listed once, keyed ``title@i``, each
    row's ``count`` the repetition count — so a listing answers symbolically, in time
    independent of the count (``ncdc params`` for a repetition of 10**12)."""
    found: list[ParamSpec] = []
    _collect(root, (), env, found, collapse)
    seen: dict[str, int] = {}
    out = []
    for p in found:
        n = seen.get(p.key, 0)
        seen[p.key] = n + 1
        if n:
            stem, _, suffix = p.key.rpartition(".")
            p = ParamSpec(f"{stem}~{n}.{suffix}", p.role, p.operator, p.site, p.shape,
                          p.axis_labels, p.datatype, p.learned, p.titles, p.count)
        out.append(p)
    return out


def repetitions(block: Block, env: Env | None) -> int:
    rep = block.tag.repetition
    if isinstance(rep, sympy.Integer):
        n = int(rep)
    elif env is None:
        raise SpecError(f"block {block.title!r} repeats a symbolic number of times "
                        f"({sympy.sstr(rep)}); bind it first", block.path)
    else:
        n = env.size(rep)
    if n > MAX_REPETITION:
        raise SpecError(f"block {block.title!r} repeats {n} times, beyond {MAX_REPETITION}: "
                        "ncdc keeps parameters per iteration and unrolls repetitions",
                        block.path, node_type="Block")
    return n


def block_segments(children: list[Morphism]) -> dict[int, str]:
    """Key segment of each titled block among siblings: the title plus ``~k`` for repeats."""
    counts: dict[str, int] = {}
    seg = {}
    for m in children:
        if isinstance(m, Block):
            t = m.title
            k = counts.get(t, 0)
            counts[t] = k + 1
            seg[id(m)] = t if k == 0 else f"{t}~{k}"
    return seg


def titled_children(node: Morphism) -> list[Morphism]:
    """The nearest Blocks below ``node`` (not descending into them), in pre-order."""
    out: list[Morphism] = []
    stack = list(reversed([c for _, c in node.children()]))
    while stack:
        m = stack.pop()
        if isinstance(m, Block):
            out.append(m)
            continue
        stack.extend(reversed([c for _, c in m.children()]))
    return out


def _collect(node: Morphism, titles: tuple[str, ...], env, found: list, collapse=None,
             count=1) -> None:
    segs = block_segments(titled_children(node)) if not isinstance(node, Block) else {}
    if isinstance(node, Block):
        _collect_body(node, titles + (node.title,), env, found, collapse, count)
        return
    _walk_level(node, titles, env, found, segs, collapse, count)


def _collapsed_count(block: Block, env, collapse):
    """The repetition count when ``block`` is to be listed once (else None)."""
    if collapse is None:
        return None
    rep = sympy.sympify(block.tag.repetition)
    if isinstance(rep, sympy.Integer):
        return int(rep) if int(rep) > collapse else None
    if env is not None and not env.missing(rep):
        n = env.size(rep)
        return n if n > collapse else None
    return env.subs(rep) if env is not None else rep


def _collect_body(block: Block, titles: tuple[str, ...], env, found, collapse=None,
                  count=1) -> None:
    segs = block_segments(titled_children(block.body) if not isinstance(block.body, Block)
                          else [block.body])
    base = titles[:-1]
    last = titles[-1] if titles else block.title
    many = _collapsed_count(block, env, collapse)
    if many is not None:
        _walk_level(block.body, base + (f"{last}@i",), env, found, segs, collapse,
                    count * many)
        return
    reps = repetitions(block, env)
    if reps <= 1:
        _walk_level(block.body, titles, env, found, segs, collapse, count)
        return
    for i in range(reps):
        _walk_level(block.body, base + (f"{last}@{i}",), env, found, segs, collapse, count)


def _walk_level(node: Morphism, titles, env, found, segs, collapse=None, count=1) -> None:
    stack = [node]
    while stack:
        m = stack.pop()
        if isinstance(m, Block):
            seg = segs.get(id(m), m.title)
            _collect_body(m, titles + (seg,), env, found, collapse, count)
            continue
        if isinstance(m, Truncated):
            stack.extend(reversed([c for _, c in m.children()]))
            continue
        if isinstance(m, Broadcasted) and not isinstance(m.operator, (BlockOperator,
                                                                      ParaBlockOperator)):
            for role, shape, labels, dt, learned in param_roles(m):
                key = "/".join(titles + (_label(m.operator),)) + "." + ROLE_SUFFIX[role]
                found.append(ParamSpec(key, role, m.operator, m, shape, labels, dt, learned,
                                       titles, count))
        stack.extend(reversed([c for _, c in m.children()]))
