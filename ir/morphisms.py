"""Morphisms of both categories and their typing (dom/cod).

Stride-category morphisms (index maps between tuples of axes) and broadcasted-category morphisms
(functions between tuples of arrays) share the structural kinds ``Rearrangement``, ``Composed``,
``ProductOfMorphisms`` and ``Block``: their ``dom``/``cod`` are tuples of :class:`Axis` in the
first case and of :class:`Array` in the second. Typing never checks joins; that is validation.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from .arrays import Array, Weave
from .axes import Axis, RawAxis
from .errors import SpecTypeError, TruncatedError
from .frozen import cached_property, quick_init
from .names import Name
from .operators import BlockOperator, Operator, ParaBlockOperator
from .tags import BlockTag, TapeSlot


@quick_init
@dataclass(frozen=True, eq=False)
class Morphism:
    """Base class: every morphism knows the JSON path it was decoded from."""

    @property
    def dom(self) -> tuple:
        raise NotImplementedError

    @property
    def cod(self) -> tuple:
        raise NotImplementedError

    def children(self) -> tuple[tuple[str, Morphism], ...]:
        """Sub-morphisms with the relative path step to each (for traversal)."""
        return ()


def _path_field():
    return field(default="", compare=False, repr=False, kw_only=True)


@quick_init
@dataclass(frozen=True, eq=False)
class Rearrangement(Morphism):
    """Copy/discard/permute: ``cod[j] = dom[mapping[j]]``. dom holds axes or arrays."""

    mapping: tuple[int, ...]
    dom_: tuple
    path: str = _path_field()

    @property
    def dom(self):
        return self.dom_

    @cached_property
    def cod(self):
        n = len(self.dom_)
        bad = [m for m in self.mapping if not 0 <= m < n]
        if bad:
            raise SpecTypeError(f"rearrangement index {bad[0]} out of range for a domain of "
                                f"{n}", self.path, node_type="Rearrangement", field_name="mapping")
        return tuple(self.dom_[m] for m in self.mapping)


@quick_init
@dataclass(frozen=True)
class StrideRow:
    """``cod_axis <- sum(strides[i] * dom[i]) + shift``."""

    axis: Axis
    strides: tuple[sympy.Expr, ...]
    shift: sympy.Expr


@quick_init
@dataclass(frozen=True, eq=False)
class StrideMorphism(Morphism):
    """An affine index map: one row per codomain axis."""

    dom_: tuple[Axis, ...]
    rows: tuple[StrideRow, ...]
    name: Name | None = None
    path: str = _path_field()

    @property
    def dom(self):
        return self.dom_

    @cached_property
    def cod(self):
        return tuple(r.axis for r in self.rows)


@quick_init
@dataclass(frozen=True, eq=False)
class Composed(Morphism):
    """Sequential composition, left to right."""

    content: tuple[Morphism, ...]
    path: str = _path_field()

    @property
    def dom(self):
        if not self.content:
            raise SpecTypeError("empty composition", self.path, node_type="Composed")
        return self.content[0].dom

    @property
    def cod(self):
        if not self.content:
            raise SpecTypeError("empty composition", self.path, node_type="Composed")
        return self.content[-1].cod

    def children(self):
        return tuple((f".content[{i}]", m) for i, m in enumerate(self.content))


@quick_init
@dataclass(frozen=True, eq=False)
class ThreadedComposed(Composed):
    """pyncd's composition with explicit routing: a pool holds the ``n_external`` inputs, then
    each step's results as they come; step ``i`` reads the pool entries ``routing[i]``; the
    result is the last step's. ``content`` is the same computation as a plain composition
    (pool shuffles and steps) so it evaluates, compiles and validates as a ``Composed``;
    ``steps`` are the JSON's ``content``."""

    steps: tuple[Morphism, ...] = ()
    routing: tuple[tuple[int, ...], ...] = ()
    n_external: int = 0

    @classmethod
    def build(cls, steps, routing, n_external: int, path: str = "") -> ThreadedComposed:
        """The equivalent plain composition; pool entry types are the steps' (an external
        input's type is that of its first reader's slot)."""
        def fail(msg):
            return SpecTypeError(msg, path, node_type="ThreadedComposed", field_name="routing")

        pool: list = [None] * n_external
        outs: list[tuple[int, ...]] = []
        for i, (step, route) in enumerate(zip(steps, routing, strict=True)):
            dom = tuple(step.dom)
            if len(route) != len(dom):
                raise fail(f"step {i} reads {len(route)} pool entries but takes {len(dom)}")
            for slot, k in enumerate(route):
                if not 0 <= k < len(pool):
                    raise fail(f"step {i} reads pool entry {k}, which does not exist yet "
                               f"(the pool holds {len(pool)})")
                if pool[k] is None:
                    pool[k] = dom[slot]
            start = len(pool)
            pool.extend(step.cod)
            outs.append(tuple(range(start, len(pool))))
        unread = [k for k in range(n_external) if pool[k] is None]
        if unread:
            raise fail(f"external input {unread[0]} is never read, so its type is unknown")
        content: list[Morphism] = []
        size = n_external
        for step, route in zip(steps, routing, strict=True):
            here = tuple(pool[:size])
            keep = tuple(range(size))
            content.append(Rearrangement(keep + tuple(route), here, path=path))
            content.append(ProductOfMorphisms((Rearrangement(keep, here, path=path), step),
                                              path=path))
            size += len(step.cod)
        content.append(Rearrangement(outs[-1], tuple(pool[:size]), path=path))
        return cls(tuple(content), path=path, steps=tuple(steps), routing=tuple(routing),
                   n_external=n_external)

    def children(self):
        return tuple((f".content[{i}]", m) for i, m in enumerate(self.steps))


@quick_init
@dataclass(frozen=True, eq=False)
class ProductOfMorphisms(Morphism):
    """Parallel composition: domains and codomains concatenate."""

    content: tuple[Morphism, ...]
    path: str = _path_field()

    @cached_property
    def dom(self):
        return tuple(x for m in self.content for x in m.dom)

    @cached_property
    def cod(self):
        return tuple(x for m in self.content for x in m.cod)

    def children(self):
        return tuple((f".content[{i}]", m) for i, m in enumerate(self.content))


@quick_init
@dataclass(frozen=True, eq=False)
class Block(Morphism):
    """A titled sub-diagram; its body runs ``tag.repetition`` times in sequence."""

    body: Morphism
    tag: BlockTag
    path: str = _path_field()

    @property
    def dom(self):
        return self.body.dom

    @property
    def cod(self):
        return self.body.cod

    @property
    def title(self) -> str:
        return self.tag.plain_title

    def children(self):
        return ((".body", self.body),)


@quick_init
@dataclass(frozen=True, eq=False)
class Broadcasted(Morphism):
    """An operator applied at every index of the degree (docs/format.md §9)."""

    operator: Operator
    input_weaves: tuple[Weave, ...]
    output_weaves: tuple[Weave, ...]
    reindexings: tuple[Morphism, ...]
    backup_degree: tuple[Axis, ...] | None = None
    path: str = _path_field()

    @cached_property
    def degree(self) -> tuple[Axis, ...]:
        if self.reindexings:
            return tuple(self.reindexings[0].dom)
        return tuple(self.backup_degree or ())

    @cached_property
    def dom(self):
        if len(self.reindexings) != len(self.input_weaves):
            raise SpecTypeError(f"{len(self.input_weaves)} input weaves but "
                                f"{len(self.reindexings)} reindexings", self.path,
                                node_type="Broadcasted", field_name="reindexings")
        out = []
        for k, (w, rx) in enumerate(zip(self.input_weaves, self.reindexings, strict=True)):
            cod = tuple(rx.cod)
            if len(cod) != w.tiled_count:
                raise SpecTypeError(
                    f"input {k}: weave has {w.tiled_count} TILED slots but its reindexing "
                    f"has {len(cod)} codomain axes", self.path + f".input_weaves[{k}]",
                    node_type="Broadcasted")
            out.append(w.fill(cod))
        return tuple(out)

    @cached_property
    def cod(self):
        deg = self.degree
        out = []
        for j, w in enumerate(self.output_weaves):
            if w.tiled_count != len(deg):
                raise SpecTypeError(
                    f"output {j}: weave has {w.tiled_count} TILED slots but the degree has "
                    f"{len(deg)} axes", self.path + f".output_weaves[{j}]",
                    node_type="Broadcasted")
            out.append(w.fill(deg))
        return tuple(out)

    def children(self):
        if isinstance(self.operator, (BlockOperator, ParaBlockOperator)):
            return ((".operator.block", self.operator.block),)
        return ()


@quick_init
@dataclass(frozen=True, eq=False)
class Grab(Morphism):
    """Read a tape slot: () -> (size,)."""

    tape: TapeSlot
    size: Array
    path: str = _path_field()

    @property
    def dom(self):
        return ()

    @property
    def cod(self):
        return (self.size,)


@quick_init
@dataclass(frozen=True, eq=False)
class Drop(Morphism):
    """Write a tape slot: (size,) -> ()."""

    tape: TapeSlot
    size: Array
    path: str = _path_field()

    @property
    def dom(self):
        return (self.size,)

    @property
    def cod(self):
        return ()


@quick_init
@dataclass(frozen=True, eq=False)
class ParaWrap(Morphism):
    """``grabs ; body ; drops`` in one box: operands with a slot come from the tape, results
    with a slot go to it; the others stay on wires."""

    body: Morphism
    grabs: tuple[TapeSlot | None, ...]
    drops: tuple[TapeSlot | None, ...]
    path: str = _path_field()

    @cached_property
    def dom(self):
        bd = self.body.dom
        if len(bd) != len(self.grabs):
            raise SpecTypeError(f"{len(self.grabs)} grab entries for a body with {len(bd)} "
                                "operands", self.path, node_type="ParaWrap", field_name="grabs")
        return tuple(a for a, g in zip(bd, self.grabs, strict=True) if g is None)

    @cached_property
    def cod(self):
        bc = self.body.cod
        if len(bc) != len(self.drops):
            raise SpecTypeError(f"{len(self.drops)} drop entries for a body with {len(bc)} "
                                "results", self.path, node_type="ParaWrap", field_name="drops")
        return tuple(a for a, d in zip(bc, self.drops, strict=True) if d is None)

    def children(self):
        return ((".body", self.body),)


@quick_init
@dataclass(frozen=True, eq=False)
class Truncated(Morphism):
    """A term cut off by truncation of the file. ``expected`` is its ``__type__`` (or None if
    unknown); ``partial`` holds the fields that were recovered complete (decoded)."""

    expected: str | None
    partial: dict
    reason: str
    path: str = _path_field()

    @property
    def dom(self):
        raise TruncatedError(f"the {self.expected or 'term'} was cut off ({self.reason})",
                             self.path, node_type=self.expected)

    @property
    def cod(self):
        raise TruncatedError(f"the {self.expected or 'term'} was cut off ({self.reason})",
                             self.path, node_type=self.expected)

    def children(self):
        out = []
        op = self.partial.get("operator")
        if isinstance(getattr(op, "block", None), Morphism):
            out.append((".operator.block", op.block))
        for key, val in self.partial.items():
            if isinstance(val, Morphism):
                out.append((f".{key}", val))
            elif isinstance(val, tuple):
                out.extend((f".{key}[{i}]", v) for i, v in enumerate(val)
                           if isinstance(v, Morphism))
        return tuple(out)


@quick_init
@dataclass(frozen=True, eq=False)
class Scan(Morphism):
    """pyncd's ``Scan`` (uncoupled, ``n_states`` 1): the recurrence ``H_0 = base(*X)``,
    ``H_{l+1} = step(H_l, *U[..., l])`` for ``l < n``, whose result is the whole history
    ``[H_0 .. H_n]`` stacked along a trailing axis of ``n + 1`` positions.

    The domain is ``base``'s inputs, then one array per further input of ``step`` with the
    recurrence ``axis`` (``n`` positions) inserted at :meth:`position` (last unless
    ``positions`` says); the codomain is ``step``'s result with :attr:`history` appended.
    ``affine`` (pyncd's associative-scan hint, ``H_{l+1} = A_l H_l + b_l``) computes the same
    history and is not kept."""

    step: Morphism
    base: Morphism
    n: sympy.Expr
    axis: Axis
    positions: tuple[int, ...] = ()
    """Where ``axis`` stands in each per-step input (pyncd's ``step_x_l_positions``; empty:
    last in every one)."""
    path: str = _path_field()

    def position(self, k: int) -> int:
        """The index of ``axis`` in per-step input ``k``'s shape."""
        return self.positions[k] if self.positions else len(self.inputs[k].shape)

    def slice_dim(self, k: int) -> int:
        """The dim (from the end) of the recurrence axis in per-step input ``k``."""
        return self.position(k) - len(self.inputs[k].shape) - 1

    @cached_property
    def history(self) -> Axis:
        """The trailing axis of the result: ``n + 1`` positions (``H_0`` first); its uid is
        ``-|uid| - 1`` of the recurrence axis, which no decoded axis has."""
        name = Name(f"{self.axis.label}+1")
        return RawAxis(-abs(self.axis.uid) - 1, name, self.n + 1, path=self.path)

    @cached_property
    def inputs(self) -> tuple[Array, ...]:
        """``step``'s inputs after the state: the per-step slices."""
        return tuple(self.step.dom)[1:]

    @cached_property
    def dom(self):
        if not self.step.dom:
            raise SpecTypeError("a Scan step takes the state as its first input", self.path,
                                node_type="Scan", field_name="step")
        if self.positions and (len(self.positions) != len(self.inputs) or not all(
                0 <= p <= len(a.shape) for p, a in zip(self.positions, self.inputs, strict=True))):
            raise SpecTypeError(f"step_x_l_positions {list(self.positions)} do not fit the "
                                f"step's {len(self.inputs)} per-step input(s)", self.path,
                                node_type="Scan", field_name="step_x_l_positions")
        out = []
        for k, a in enumerate(self.inputs):
            p = self.position(k)
            out.append(Array(a.datatype, tuple(a.shape[:p]) + (self.axis,) + tuple(a.shape[p:])))
        return tuple(self.base.dom) + tuple(out)

    @cached_property
    def cod(self):
        if len(self.step.cod) != 1 or len(self.base.cod) != 1:
            raise SpecTypeError(f"a Scan's step and base give one state each (they give "
                                f"{len(self.step.cod)} and {len(self.base.cod)})", self.path,
                                node_type="Scan")
        h = self.step.cod[0]
        return (Array(h.datatype, tuple(h.shape) + (self.history,)),)

    def children(self):
        return ((".base", self.base), (".step", self.step))


@quick_init
@dataclass(frozen=True, eq=False)
class CoupledScan(Morphism):
    """pyncd's coupled ``Scan`` (``n_states`` > 1, Jacobi): states ``k`` start at
    ``H^k_0 = bases[k](*X_k)`` and step together, ``H^k_{l+1} = steps[k](*(H^j_l for j in
    deps[k]), *U_k[..., l])`` (every step reads the old states); the result is one history
    per state, each stacked along a trailing axis of ``n + 1`` positions.

    The domain is every base's inputs in state order, then every step's per-step inputs (those
    after its ``deps``) in state order, each with ``axis`` last; the codomain is each step's
    result with the history axis of :class:`Scan` appended."""

    steps: tuple[Morphism, ...]
    bases: tuple[Morphism, ...]
    deps: tuple[tuple[int, ...], ...]
    n: sympy.Expr
    axis: Axis
    path: str = _path_field()

    @cached_property
    def history(self) -> Axis:
        """As :attr:`Scan.history`."""
        return RawAxis(-abs(self.axis.uid) - 1, Name(f"{self.axis.label}+1"), self.n + 1,
                       path=self.path)

    @cached_property
    def inputs(self) -> tuple[tuple[Array, ...], ...]:
        """Per state, its step's inputs after the states it reads."""
        if not (len(self.steps) == len(self.bases) == len(self.deps) >= 2) or any(
                not 0 <= j < len(self.steps) for d in self.deps for j in d):
            raise SpecTypeError(f"a coupled Scan needs one base, one step and one list of state "
                                f"indices below {len(self.steps)} per state", self.path,
                                node_type="Scan", field_name="step_state_deps")
        out = []
        for k, (step, d) in enumerate(zip(self.steps, self.deps, strict=True)):
            dom = tuple(step.dom)
            if len(dom) < len(d):
                raise SpecTypeError(f"step {k} reads {len(d)} states but takes {len(dom)} "
                                    "inputs", self.path, node_type="Scan")
            out.append(dom[len(d):])
        return tuple(out)

    def slice_dim(self, k: int) -> int:
        """The dim (from the end) of the recurrence axis in flat per-step input ``k``."""
        return -1

    @cached_property
    def dom(self):
        per_step = tuple(Array(a.datatype, tuple(a.shape) + (self.axis,))
                         for ins in self.inputs for a in ins)
        return tuple(x for b in self.bases for x in b.dom) + per_step

    @cached_property
    def cod(self):
        out = []
        for k, step in enumerate(self.steps):
            if len(step.cod) != 1 or len(self.bases[k].cod) != 1:
                raise SpecTypeError(f"state {k}: its step and base give one state each",
                                    self.path, node_type="Scan")
            h = step.cod[0]
            out.append(Array(h.datatype, tuple(h.shape) + (self.history,)))
        return tuple(out)

    def children(self):
        return tuple((f".base[{k}]", b) for k, b in enumerate(self.bases)) + tuple(
            (f".step[{k}]", s) for k, s in enumerate(self.steps))
