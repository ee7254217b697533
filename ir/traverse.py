"""The one wire-threading traversal of a morphism: :func:`traverse` runs a :class:`Visitor`.

A consumer chooses what a *wire value* is (an array, a graph port, a wire number, ``None``)
and answers only for the leaves; :func:`traverse` threads the tuple of values through the
structure, in evaluation order:

* ``Composed`` left to right; a ``ThreadedComposed`` step by step through its pool (the
  inputs, then every step's results; step ``i`` reads ``routing[i]``; the result is the last
  step's), so steps keep their JSON paths;
* ``ProductOfMorphisms``: the tuple splits into consecutive chunks of the parts' arities
  (:func:`ir.walk.arity`);
* ``Rearrangement``: ``cod[j] = dom[mapping[j]]`` (:meth:`Visitor.rearrange`);
* ``Block``: :meth:`Visitor.enter_block`, the body :meth:`Visitor.repetitions` times, each
  iteration fed the last one's results, then :meth:`Visitor.leave_block`;
* ``ParaWrap``: operands with a slot come from :meth:`Visitor.grab` (before the body),
  results with a slot go to :meth:`Visitor.drop` (after it); the rest stay on wires;
* free ``Grab`` / ``Drop``: :meth:`Visitor.grab` / :meth:`Visitor.drop`;
* ``Broadcasted``: :meth:`Visitor.operator`; a box (``BlockOperator``/``ParaBlockOperator``)
  goes to :meth:`Visitor.box`, which by default runs the box's block in place on the same
  values (a ``ParaBlockOperator``'s grab ports are dropped to the tape first, its drop ports
  grabbed last);
* ``Scan`` / ``CoupledScan``: :meth:`Visitor.scan` / :meth:`Visitor.coupled_scan`, by default ``base`` on the first inputs, then ``step`` ``n``
  times on the state and the other inputs sliced at the step (:meth:`Visitor.scan_slice`),
  the states stacked into the history (:meth:`Visitor.scan_stack`);
* ``Truncated`` / ``StrideMorphism`` (no function on arrays): :meth:`Visitor.truncated` /
  :meth:`Visitor.stride`, which raise a typed error unless overridden.

A kind listed in :attr:`Visitor.leaves` is not descended into: :meth:`Visitor.leaf` answers
for it. A hook may answer with a :class:`Descend` instead of values, to have the traversal
continue into morphisms of its choosing (a cut composition's complete items, a box's block).

Every hook gets the :class:`Scope` of its node: the JSON ``path``, the display ``titles`` of
the enclosing blocks, the parameter-key ``keys`` (block segments ``title~k`` for a title
repeated among siblings, ``title@i`` per iteration of a repeated block: the keys of
:mod:`ir.params`), the path of the innermost enclosing ``block`` and the nesting ``depth``.

The traversal is iterative (an explicit stack of frames), so a composition nested 10,000 deep
never raises ``RecursionError``.

Which walk to use: :func:`ir.walk.walk` lists the sites one at a time (no wires: checks,
reports, listings), and :func:`ir.walk.by_kind` picks a per-kind handler from a table keyed by
class; whatever follows the wires (evaluation, code, the wiring graph, the tape order,
data-flow) is a :class:`Visitor`. No other code branches on many morphism kinds itself
(``tests/test_traversal.py`` counts the functions that still do).

Using it — the producer of every wire (values are ``(producer path, port)``)::

    from ncdc.ir.traverse import Visitor, traverse

    class Producers(Visitor):
        def operator(self, node, ins, scope):
            return [(scope.path, j) for j in range(len(node.output_weaves))]

        def grab(self, slot, array, scope):
            return (f"tape:{slot.uid}", 0)

        def drop(self, slot, value, array, scope):
            pass

    n = len(root.dom)
    outs = traverse(root, [("input", k) for k in range(n)], Producers())
    # outs[j] names the box (or input) whose port feeds the root's output j
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy

from .errors import SpecError, SpecTypeError, TruncatedError
from .frozen import quick_init
from .morphisms import (
    Block,
    Broadcasted,
    Composed,
    CoupledScan,
    Drop,
    Grab,
    Morphism,
    ParaWrap,
    ProductOfMorphisms,
    Rearrangement,
    Scan,
    StrideMorphism,
    ThreadedComposed,
    Truncated,
)
from .operators import BlockOperator, ParaBlockOperator
from .params import MAX_REPETITION, block_segments, titled_children
from .walk import arity, by_kind


class _Level:
    """The key segments of the titled blocks reachable from ``node`` without entering one,
    computed when first asked for (most traversals never meet a repeated title)."""

    __slots__ = ("_segs", "node")

    def __init__(self, node: Morphism | None, segs: dict | None = None):
        self.node = node
        self._segs = segs

    def segs(self) -> dict:
        if self._segs is None:
            node = self.node
            kids: list[Morphism]
            if isinstance(node, Block):  # a block's body: the body itself may be titled
                body = node.body
                kids = [body] if isinstance(body, Block) else titled_children(body)
            else:
                kids = titled_children(node) if node is not None else []
            self._segs = block_segments(kids)
        return self._segs


class _Keys:
    """The parameter-key titles of a block body, computed when first asked for: the outer
    keys, then the block's segment (``title~k`` for a title repeated among its siblings;
    ``@i`` added per iteration of a repeated block)."""

    __slots__ = ("block", "iteration", "level", "outer", "value")

    def __init__(self, outer=None, level=None, block=None, iteration=None, value=None):
        self.outer, self.level, self.block = outer, level, block
        self.iteration, self.value = iteration, value

    def get(self) -> tuple:
        chain, k = [], self
        while k.value is None:  # iterative: a chain of bodies may be thousands deep
            chain.append(k)
            k = k.outer
        for k in reversed(chain):
            seg = k.level.segs().get(id(k.block), k.block.title)
            if k.iteration is not None:
                seg = f"{seg}@{k.iteration}"
            k.value = k.outer.value + (seg,)
        return self.value


class Scope:
    """Where a node sits: its JSON ``path``; the display ``titles`` of the enclosing blocks
    (its own when it is a block's body); the parameter-key ``keys`` (see the module docstring);
    ``blocks``: the JSON paths of the enclosing blocks, outermost first; ``depth``."""

    __slots__ = ("_keys", "blocks", "depth", "level", "path", "titles")

    def __init__(self, path: str, titles: tuple = (), keys: tuple | _Keys = (),
                 level: _Level | None = None, blocks: tuple = (), depth: int = 0):
        self.path = path
        self.titles = titles
        self._keys = keys if isinstance(keys, _Keys) else _Keys(value=tuple(keys))
        self.level = level if level is not None else _Level(None, {})
        self.blocks = blocks
        self.depth = depth

    @property
    def keys(self) -> tuple:
        """The parameter-key titles (module docstring)."""
        return self._keys.get()

    @property
    def segs(self) -> dict:
        """The key segment of each titled block reachable at this level (id -> segment)."""
        return self.level.segs()

    @property
    def block(self) -> str:
        """The JSON path of the innermost enclosing block ("" at the top)."""
        return self.blocks[-1] if self.blocks else ""

    def at(self, step: str) -> Scope:
        """The scope of a child reached by the JSON path step ``step``."""
        return Scope(self.path + step, self.titles, self._keys, self.level, self.blocks,
                     self.depth + 1)

    def __repr__(self) -> str:
        return f"Scope({self.path!r}, titles={self.titles!r}, keys={self.keys!r})"


@quick_init
@dataclass(frozen=True)
class Descend:
    """A hook's answer "continue into these morphisms": thread ``ins`` through ``items``
    (``(path step, morphism)`` pairs) left to right, ``title`` (if any) appended to the
    display titles; ``then(results)``, if given, turns the last results into the answer (values,
    or a further :class:`Descend`)."""

    items: tuple
    ins: list
    title: str | None = None
    then: Callable[[list], Any] | None = None
    """May answer another :class:`Descend` (same scope): the traversal continues with it."""


class Visitor:
    """The hooks :func:`traverse` calls; override what the consumer needs. ``operator`` has no
    default. Hooks answer with a list of wire values (or a :class:`Descend`)."""

    leaves: tuple[type, ...] = ()
    """Kinds answered by :meth:`leaf` instead of being descended into."""

    def leaf(self, node: Morphism, ins: list, scope: Scope):
        raise NotImplementedError(f"{type(self).__name__} lists {type(node).__name__} as a "
                                  "leaf but has no leaf hook")

    def operator(self, node: Broadcasted, ins: list, scope: Scope):
        """An operator applied over its degree (not a box)."""
        raise NotImplementedError(f"{type(self).__name__} has no operator hook")

    def box(self, node: Broadcasted, ins: list, scope: Scope):
        """A ``BlockOperator``/``ParaBlockOperator``: by default its block, in place."""
        op = node.operator
        if not isinstance(op, ParaBlockOperator):
            return Descend(((".operator.block", getattr(op, "block", None)),), ins)
        ng = len(op.grabs)
        for i, (g, v) in enumerate(zip(op.grabs, ins[:ng], strict=False)):  # short: ill-typed
            self.drop(g.tape, v, g.size, scope.at(f".operator.grabs[{i}]"))

        def ports(results: list) -> list:
            return list(results) + [self.grab(d.tape, d.size, scope.at(f".operator.drops[{j}]"))
                                    for j, d in enumerate(op.drops)]
        return Descend(((".operator.block", op.block),), list(ins[ng:]), then=ports)

    def rearrange(self, node: Rearrangement, ins: list, scope: Scope):
        """``cod[j] = dom[mapping[j]]``; an entry outside the values is a typed error."""
        try:
            return [ins[j] for j in node.mapping]
        except IndexError:
            raise SpecTypeError(f"rearrangement {list(node.mapping)} reads past its "
                                f"{len(ins)} input(s)", scope.path,
                                node_type="Rearrangement") from None

    def grab(self, slot, array, scope: Scope):
        """The value read from tape ``slot`` (``array``: the type read, or None)."""
        raise SpecError(f"{type(self).__name__} cannot read the tape", scope.path)

    def drop(self, slot, value, array, scope: Scope) -> None:
        """Write ``value`` to tape ``slot``."""
        raise SpecError(f"{type(self).__name__} cannot write the tape", scope.path)

    def split(self, node: ProductOfMorphisms, ins: list, scope: Scope) -> None:
        """Before a product's values split among its parts (a consumer may check their
        count)."""

    def enter_block(self, block: Block, ins: list, scope: Scope) -> None:
        """Before a block's first iteration; ``scope`` is its body's (keys without ``@i``)."""

    def leave_block(self, block: Block, outs: list, scope: Scope) -> None:
        """After a block's last iteration."""

    def repetitions(self, block: Block, scope: Scope) -> int:
        """How many times the body runs: the tag's count when it is a literal, else an error."""
        rep = block.tag.repetition
        if isinstance(rep, (int, sympy.Integer)):
            return int(rep)
        raise SpecError(f"block {block.title!r} repeats a symbolic number of times "
                        f"({sympy.sstr(rep)}); bind it first", scope.path, node_type="Block")

    def scan(self, node: Scan, ins: list, scope: Scope):
        """``base`` on the first ``len(base.dom)`` values, then ``step`` :meth:`scan_steps`
        times (:meth:`scan_iteration` before each), each on the last state and the other values
        sliced at the step; the history of states (``H_0`` first) stacked by
        :meth:`scan_stack`."""
        nb = arity(node.base)
        xs = list(ins[nb:])
        n = self.scan_steps(node, scope)
        history: list = []

        def after(i: int):
            def then(results: list):
                history.append(results[0])
                if i == n:
                    return [self.scan_stack(node, history, scope)]
                sliced = [self.scan_slice(node, k, x, i, scope) for k, x in enumerate(xs)]
                self.scan_iteration(node, i, scope)
                return Descend(((".step", node.step),), [results[0]] + sliced, then=after(i + 1))
            return then
        return Descend(((".base", node.base),), list(ins[:nb]), then=after(0))

    def coupled_scan(self, node: CoupledScan, ins: list, scope: Scope):
        """Each ``bases[k]`` on its inputs, then :meth:`scan_steps` rounds in which every
        ``steps[k]`` reads the previous round's states ``deps[k]`` and its own inputs sliced at
        the round (Jacobi); one history per state, stacked by :meth:`scan_stack`."""
        n_states = len(node.steps)
        at, base_ins = 0, []
        for b in node.bases:
            base_ins.append(list(ins[at:at + arity(b)]))
            at += arity(b)
        xs: list[list] = []
        firsts: list[int] = []
        for own in node.inputs:
            firsts.append(len(xs))
            xs.append(list(ins[at:at + len(own)]))
            at += len(own)
        n = self.scan_steps(node, scope)
        histories: list[list] = [[] for _ in range(n_states)]

        def bases(k: int, states: list):
            if k == n_states:
                return rounds(0, states)
            return Descend(((f".base[{k}]", node.bases[k]),), base_ins[k],
                           then=lambda res: bases(k + 1, states + [res[0]]))

        def rounds(i: int, states: list):
            for k in range(n_states):
                histories[k].append(states[k])
            if i == n:
                return [self.scan_stack(node, h, scope) for h in histories]
            sliced = [[self.scan_slice(node, firsts[k] + m, x, i, scope)
                       for m, x in enumerate(xs[k])] for k in range(n_states)]
            self.scan_iteration(node, i, scope)
            return steps(i, 0, states, [], sliced)

        def steps(i: int, k: int, old: list, new: list, sliced: list):
            if k == n_states:
                return rounds(i + 1, new)
            return Descend(((f".step[{k}]", node.steps[k]),),
                           [old[j] for j in node.deps[k]] + sliced[k],
                           then=lambda res: steps(i, k + 1, old, new + [res[0]], sliced))
        return bases(0, [])

    def scan_steps(self, node: Scan | CoupledScan, scope: Scope) -> int:
        """How many steps a scan runs: ``n`` when it is a literal; a symbolic ``n``, once (a
        consumer without sizes follows the wires; one with sizes binds it)."""
        if isinstance(node.n, (int, sympy.Integer)):
            return scan_length(node, int(node.n), scope.path)
        return 1

    def scan_iteration(self, node: Scan | CoupledScan, step: int, scope: Scope) -> None:
        """Before ``step`` runs for the ``step``-th time (from 0): every iteration is the same
        occurrence of the step's operators (one set of parameters, as in pyncd)."""

    def scan_slice(self, node: Scan | CoupledScan, k: int, value, step: int, scope: Scope):
        """Per-step input ``k``'s value at ``step`` of the recurrence axis (at
        ``node.position(k)`` of its shape). The default
        suits values that stand for wires, not arrays: the input's own value."""
        return value

    def scan_stack(self, node: Scan | CoupledScan, values: list, scope: Scope):
        """The states ``H_0 .. H_n`` stacked along a new last axis. The default suits values
        that stand for wires, not arrays: the last state's value."""
        return values[-1]

    def truncated(self, node: Truncated, ins: list, scope: Scope):
        raise TruncatedError(f"the {node.expected or 'term'} here was cut off ({node.reason})",
                             scope.path, scope.titles, node_type=node.expected)

    def stride(self, node: StrideMorphism, ins: list, scope: Scope):
        raise SpecTypeError("a StrideMorphism is an index map, not a function on arrays",
                            scope.path, scope.titles, node_type="StrideMorphism")

    def unknown(self, node: Morphism, ins: list, scope: Scope):
        raise SpecTypeError(f"a {type(node).__name__} is not a morphism the traversal knows",
                            scope.path, scope.titles, node_type=type(node).__name__)


def scan_length(node: Scan | CoupledScan, n: int, path: str) -> int:
    """``n`` (a scan's bound step count) when it is one a traversal can unroll: from 0 to
    :data:`ir.params.MAX_REPETITION`, as a repeated block."""
    if not 0 <= n <= MAX_REPETITION:
        raise SpecError(f"a Scan over {node.axis.label} runs {n} steps; ncdc unrolls from 0 to "
                        f"{MAX_REPETITION}", path, node_type="Scan")
    return n


def traverse(root: Morphism, ins, visitor: Visitor, root_path: str | None = None,
             titles: tuple = (), keys: tuple = (), segs: dict | None = None) -> list:
    """Thread the values ``ins`` through ``root`` with ``visitor`` (module docstring); the
    root's output values. ``root_path`` defaults to ``root.path``; ``keys`` are the enclosing
    parameter-key titles and ``segs`` (id -> segment) those of the root's level when ``root``
    is a part of a larger one (default: computed from ``root`` alone)."""
    path = getattr(root, "path", "") if root_path is None else root_path
    if segs is not None:
        level = _Level(root, segs)
    else:
        level = _Level(None, {}) if isinstance(root, Block) else _Level(root)
    return _Run(visitor).run(root, list(ins), Scope(path, tuple(titles), tuple(keys), level))


class _Run:
    def __init__(self, visitor: Visitor):
        self.v = visitor
        self.levels: dict[int, _Level] = {}
        self.leaves = tuple(visitor.leaves)

    def run(self, root, ins, scope) -> list:
        stack: list = []
        answer = self.step(root, ins, scope, stack)
        while stack:
            frame = stack[-1]
            try:
                child, cins, cscope = frame.send(answer)
            except StopIteration as stop:
                stack.pop()
                answer = stop.value
                continue
            answer = self.step(child, cins, cscope, stack)
        return answer

    def step(self, m, ins, scope, stack):
        """The node's values when it is a leaf; else push its frame and answer None (the value
        a fresh frame is started with)."""
        if self.leaves and isinstance(m, self.leaves):
            out = self.v.leaf(m, ins, scope)
        else:
            out = by_kind(_HANDLERS, m, _Run.unknown)(self, m, ins, scope)
        if isinstance(out, Descend):
            out = self.descend(out, scope)
        if hasattr(out, "send"):
            stack.append(out)
            return None
        return out

    # ------------------------------------------------------------------ leaves
    def broadcasted(self, m, ins, scope):
        if isinstance(m.operator, (BlockOperator, ParaBlockOperator)):
            return self.v.box(m, ins, scope)
        return self.v.operator(m, ins, scope)

    def grab(self, m, ins, scope):
        return [self.v.grab(m.tape, m.size, scope)]

    def drop(self, m, ins, scope):
        if ins:
            self.v.drop(m.tape, ins[0], m.size, scope)
        return []

    # --------------------------------------------------------------- structure
    def composed(self, m, ins, scope):
        for i, part in enumerate(m.content):
            ins = yield part, ins, scope.at(f".content[{i}]")
        return ins

    def threaded(self, m, ins, scope):
        pool, last = list(ins), []
        for i, (part, route) in enumerate(zip(m.steps, m.routing, strict=True)):
            reads = [pool[k] for k in route if k < len(pool)]
            last = yield part, reads, scope.at(f".content[{i}]")
            pool.extend(last)
        return last

    def product(self, m, ins, scope):
        self.v.split(m, ins, scope)
        out, at = [], 0
        for i, part in enumerate(m.content):
            n = arity(part)
            out.extend((yield part, ins[at:at + n], scope.at(f".content[{i}]")))
            at += n
        return out

    def block(self, m, ins, scope):
        keys = _Keys(scope._keys, scope.level, m)
        inner = Scope(scope.path + ".body", scope.titles + (m.title,), keys,
                      self.level_of(m), scope.blocks + (scope.path,), scope.depth + 1)
        reps = self.v.repetitions(m, inner)
        self.v.enter_block(m, ins, inner)
        for i in range(reps):
            it = inner if reps <= 1 else Scope(inner.path, inner.titles,
                                                _Keys(scope._keys, scope.level, m, i),
                                                inner.level, inner.blocks, inner.depth)
            ins = yield m.body, ins, it
        self.v.leave_block(m, ins, inner)
        return ins

    def level_of(self, m: Block) -> _Level:
        hit = self.levels.get(id(m))
        if hit is None:
            hit = self.levels[id(m)] = _Level(m)
        return hit

    def parawrap(self, m, ins, scope):
        body_dom = _typed(m.body, "dom", len(m.grabs))
        operands, it = [], iter(ins)
        for i, slot in enumerate(m.grabs):
            if slot is None:
                nxt = next(it, _MISSING)
                if nxt is not _MISSING:
                    operands.append(nxt)
            else:
                arr = body_dom[i] if i < len(body_dom) else None
                operands.append(self.v.grab(slot, arr, scope.at(f".grabs[{i}]")))
        results = yield m.body, operands, scope.at(".body")
        body_cod = _typed(m.body, "cod", len(m.drops))
        out = []
        for j, val in enumerate(results):
            slot = m.drops[j] if j < len(m.drops) else None
            if slot is None:
                out.append(val)
            else:
                arr = body_cod[j] if j < len(body_cod) else None
                self.v.drop(slot, val, arr, scope.at(f".drops[{j}]"))
        return out

    def descend(self, d: Descend, scope):
        inner = scope if d.title is None else Scope(scope.path, scope.titles + (d.title,),
                                                    scope._keys, scope.level, scope.blocks,
                                                    scope.depth)
        return self._descend(d, inner)

    def _descend(self, d: Descend, scope):
        while True:
            ins = d.ins
            for step, part in d.items:
                ins = yield part, ins, scope.at(step)
            if d.then is None:
                return ins
            out = d.then(ins)
            if not isinstance(out, Descend):
                return out
            d = out                             # "then continue into these"

    def rearrange(self, m, ins, scope):
        return self.v.rearrange(m, ins, scope)

    def scan(self, m, ins, scope):
        return self.v.scan(m, ins, scope)

    def coupled_scan(self, m, ins, scope):
        return self.v.coupled_scan(m, ins, scope)

    def truncated(self, m, ins, scope):
        return self.v.truncated(m, ins, scope)

    def stride(self, m, ins, scope):
        return self.v.stride(m, ins, scope)

    def unknown(self, m, ins, scope):
        return self.v.unknown(m, ins, scope)


_MISSING = object()


def _typed(m: Morphism, attr: str, n: int) -> tuple:
    """``m.dom`` / ``m.cod``, or ``n`` Nones when it cannot be typed."""
    try:
        return tuple(getattr(m, attr))
    except (SpecError, RecursionError):
        return (None,) * n


_HANDLERS: dict[type, Any] = {
    ThreadedComposed: _Run.threaded, Composed: _Run.composed, ProductOfMorphisms: _Run.product,
    Rearrangement: _Run.rearrange, Block: _Run.block, Broadcasted: _Run.broadcasted,
    ParaWrap: _Run.parawrap, Grab: _Run.grab, Drop: _Run.drop, Truncated: _Run.truncated,
    StrideMorphism: _Run.stride, Scan: _Run.scan, CoupledScan: _Run.coupled_scan,
}
"""The frame (or leaf answer) of each kind, by class (:func:`ir.walk.by_kind`)."""

__all__ = ["Descend", "Scope", "Visitor", "scan_length", "traverse"]
