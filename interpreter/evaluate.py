"""Evaluation of the structural morphisms (FORMAT.md §8–§10) and of each ``Broadcasted``.

* ``Rearrangement`` on wires copies / discards / permutes the tuple (no data moves);
* ``Composed`` runs left to right; ``ProductOfMorphisms`` splits the tuple by the parts' arities;
* ``Block`` runs its body ``repetition`` times (parameters per iteration, keyed ``title@i``);
* ``Broadcasted``: each input is read through its reindexing into ``(*batch, *degree,
  *target)`` (:func:`interpreter.reindex.gather`), the operator's rule runs on the trailing
  target dims, and each result's degree dims move into its output weave's TILED positions;
  emulate mode then rounds per ``QUANT_POLICY.md``;
* boxes (``BlockOperator``/``ParaBlockOperator``) run their block *lifted*: the box's
  ``(*batch, *degree)`` becomes the block's batch — every array of the body carries it as
  leading dimensions;
* the tape is one dict ``slot uid -> value`` per evaluation: ``ParaWrap`` grabs/drops, free
  ``Grab``/``Drop``, and ``ParaBlockOperator`` ports (grabs first, drops last).

Errors from user data are :class:`~ir.errors.EvaluationError` with the JSON path and the block
titles of the ``Broadcasted`` where they arose.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ncdc.ir.arrays import TILED
from ncdc.ir.errors import EvaluationError, SpecError, SpecTypeError, TruncatedError
from ncdc.ir.morphisms import (
    Block,
    Broadcasted,
    Composed,
    Drop,
    Grab,
    ParaWrap,
    ProductOfMorphisms,
    Rearrangement,
    StrideMorphism,
    Truncated,
)
from ncdc.ir.operators import BlockOperator, ParaBlockOperator
from ncdc.ir.params import block_segments, param_roles, repetitions, titled_children
from ncdc.ir.rewrites import BankDiagonal

from . import fusion
from .context import RuleContext
from .formulas import lower
from .registry import rule_for
from .reindex import GatherPlan, affine_map, gather
from .rounding import output_format, round_values
from .values import Value, with_rank, zero_dead

NUMPY_ERRORS = (ValueError, IndexError, TypeError, ArithmeticError, KeyError)


def unevaluable(m, titles) -> SpecError:
    """The typed error for a term that is no function on arrays: a cut term, an index map, or
    an unknown kind (shared by the tree walk and the plans)."""
    if isinstance(m, Truncated):
        return TruncatedError(f"cannot evaluate: the {m.expected or 'term'} here was cut off "
                              f"({m.reason})", m.path, titles, node_type=m.expected)
    if isinstance(m, StrideMorphism):
        return SpecTypeError("a StrideMorphism is an index map, not a function on arrays",
                             m.path, titles, node_type="StrideMorphism")
    return EvaluationError(f"cannot evaluate a {type(m).__name__}", getattr(m, "path", ""),
                           titles)


@dataclass(frozen=True)
class Scope:
    """The parameter-key context: the key segments of the enclosing blocks (``titles``) and the
    segment of each titled block reachable at this level (``segs``: id -> ``title[~k]``)."""

    titles: tuple[str, ...]
    segs: dict


class Evaluator:
    """Evaluates one root morphism under one env; caches gather plans, formulas and segment
    tables across calls. Not thread-safe (the tape and occurrence counters are per call)."""

    def __init__(self, root, env, *, quant: str, table, params: dict, fuse: bool = True,
                 seed: int = 0):
        if quant not in ("exact", "emulate"):
            raise ValueError(f"quant must be 'exact' or 'emulate', not {quant!r}")
        self.root, self.env, self.quant = root, env, quant
        self.table, self.params, self.fuse = table, params, fuse
        self.seed = seed
        self._rng = None
        self.observer = None
        self.on_entry = None
        self.perturb = None
        self.tape: dict[int, tuple[Value, int, tuple[int, ...]]] = {}
        self.counts: dict = {}
        self._plans: dict = {}
        self._segs: dict = {}
        self._formulas: dict = {}
        self._degrees: dict = {}
        self._roles: dict = {}

    # ------------------------------------------------------------------ entry
    def start(self, tape: dict | None = None, observer=None, on_entry=None,
              perturb=None) -> None:
        """Reset the per-evaluation state: the tape, occurrence counters, hooks, generator.
        ``observer(block, titles, outputs, batch)`` after and ``on_entry(block, titles, inputs,
        batch)`` before each block body, where given; ``perturb(values)`` replaces every
        operator result's values (error injection: ``codegen.tolerance``)."""
        self.tape = dict(tape or {})
        self.counts = {}
        self.observer = observer
        self.on_entry = on_entry
        self.perturb = perturb
        self._rng = None

    def run(self, inputs: list[Value], tape: dict | None = None, observer=None,
            batch: tuple[int, ...] = (), on_entry=None, perturb=None) -> list[Value]:
        """Evaluate the root on ``inputs`` (each leading with the ``batch`` dims); hooks as in
        :meth:`start`."""
        self.start(tape, observer, on_entry, perturb)
        root = self.root
        if isinstance(root, Block):
            return self._block_body(root, list(inputs), (root.title,), tuple(batch))
        scope = Scope((), self._level_segs(root))
        return self.eval(root, list(inputs), scope, tuple(batch))

    @property
    def rng(self) -> np.random.Generator:
        """A generator seeded per evaluation (for operators that sample; none in the seed)."""
        if self._rng is None:
            self._rng = np.random.default_rng(self.seed)
        return self._rng

    # -------------------------------------------------------------- dispatch
    def eval(self, m, ins: list[Value], scope: Scope, batch: tuple[int, ...]) -> list[Value]:
        if isinstance(m, Broadcasted):
            return self._broadcasted(m, ins, scope, batch)
        if isinstance(m, BankDiagonal) and fusion.applies(m, self):
            params, _ = self._take_params(m.linear, scope)
            return fusion.linear_then_diagonal(self, m.linear, m.view, ins, scope, batch, params)
        if isinstance(m, Composed):
            return self._composed(m, ins, scope, batch)
        if isinstance(m, ProductOfMorphisms):
            return self._product(m, ins, scope, batch)
        if isinstance(m, Rearrangement):
            self._arity(m, ins)
            return [ins[k] for k in m.mapping]
        if isinstance(m, Block):
            seg = scope.segs.get(id(m), m.title)
            return self._block_body(m, ins, scope.titles + (seg,), batch)
        if isinstance(m, ParaWrap):
            return self._parawrap(m, ins, scope, batch)
        if isinstance(m, Grab):
            return [self.tape_read(m.tape, batch, m.path)]
        if isinstance(m, Drop):
            self._arity(m, ins)
            self.tape_write(m.tape, ins[0], batch, self.env.sizes(m.size.shape))
            return []
        raise unevaluable(m, scope.titles)

    def _arity(self, m, ins):
        if len(ins) != len(m.dom):
            raise EvaluationError(f"{type(m).__name__} takes {len(m.dom)} arrays, got "
                                  f"{len(ins)}", m.path, node_type=type(m).__name__)

    # ------------------------------------------------------------ structure
    def _composed(self, m: Composed, ins, scope, batch):
        if not m.content:
            raise SpecTypeError("empty composition", m.path, scope.titles)
        for item in m.content:
            ins = self.eval(item, ins, scope, batch)
        return ins

    def _product(self, m: ProductOfMorphisms, ins, scope, batch):
        self._arity(m, ins)
        out, at = [], 0
        for part in m.content:
            k = len(part.dom)
            out.extend(self.eval(part, ins[at:at + k], scope, batch))
            at += k
        return out

    def _block_body(self, blk: Block, ins, titles, batch):
        reps = repetitions(blk, self.env)
        if reps > 1 and len(blk.dom) != len(blk.cod):
            raise SpecTypeError(f"block {blk.title!r} repeats {reps} times but its domain and "
                                "codomain differ", blk.path, titles)
        segs = self._body_segs(blk)
        if self.on_entry is not None:
            self.on_entry(blk, titles, ins, batch)
        for i in range(reps):
            t = titles if reps <= 1 else titles[:-1] + (f"{titles[-1]}@{i}",)
            ins = self.eval(blk.body, ins, Scope(t, segs), batch)
        if self.observer is not None:
            self.observer(blk, titles, ins, batch)
        return ins

    def _body_segs(self, blk: Block) -> dict:
        hit = self._segs.get(id(blk))
        if hit is None:
            body = blk.body
            hit = block_segments([body] if isinstance(body, Block) else titled_children(body))
            self._segs[id(blk)] = hit
        return hit

    def _level_segs(self, root) -> dict:
        return block_segments(titled_children(root))

    def _parawrap(self, m: ParaWrap, ins, scope, batch):
        self._arity(m, ins)
        operands, it = [], iter(ins)
        for slot, _arr in zip(m.grabs, m.body.dom):
            operands.append(self.tape_read(slot, batch, m.path) if slot is not None
                            else next(it))
        results = self.eval(m.body, operands, scope, batch)
        out = []
        for slot, arr, v in zip(m.drops, m.body.cod, results):
            if slot is None:
                out.append(v)
            else:
                self.tape_write(slot, v, batch, self.env.sizes(arr.shape))
        return out

    # ----------------------------------------------------------------- tape
    def tape_write(self, slot, v: Value, batch, shape) -> None:
        self.tape[slot.uid] = (v, len(batch), tuple(batch) + tuple(shape))

    def tape_read(self, slot, batch, path: str = "") -> Value:
        entry = self.tape.get(slot.uid)
        if entry is None:
            raise EvaluationError(f"tape slot {slot.label!r} (uid {slot.uid}) is read before "
                                  "anything writes it; supply it in the tape", path)
        v, nb, _shape = entry
        if nb > len(batch):
            raise EvaluationError(f"tape slot {slot.label!r} was written inside a lifted block "
                                  "and is read outside it", path)
        rank = len(batch) - nb + v.values.ndim
        return Value(with_rank(v.values, rank),
                     None if v.live is None else with_rank(v.live, rank))

    # ---------------------------------------------------------- broadcasted
    def degree_sizes(self, b: Broadcasted) -> tuple[int, ...]:
        hit = self._degrees.get(id(b))
        if hit is None:
            hit = self._degrees[id(b)] = self.env.sizes(b.degree)
        return hit

    def plan(self, b: Broadcasted, k: int) -> GatherPlan:
        key = (id(b), k)
        hit = self._plans.get(key)
        if hit is None:
            w = b.input_weaves[k]
            amap = affine_map(b.reindexings[k], self.env)
            if amap.dom_sizes != self.degree_sizes(b):
                raise SpecTypeError(f"reindexing {k} does not start at the degree", b.path,
                                    node_type="Broadcasted")
            if len(amap.cod_sizes) != w.tiled_count:
                raise SpecTypeError(f"input {k}: {w.tiled_count} TILED slots but the "
                                    f"reindexing has {len(amap.cod_sizes)} codomain axes",
                                    b.path, node_type="Broadcasted")
            hit = GatherPlan(amap, w.tiled_positions, w.target_positions,
                             self.env.sizes(w.target))
            self._plans[key] = hit
        return hit

    def formula(self, op):
        hit = self._formulas.get(id(op))
        if hit is None:
            hit = self._formulas[id(op)] = lower(op.formula, self.env)
        return hit

    def _take_params(self, b: Broadcasted, scope: Scope):
        roles = self._roles.get(id(b))
        if roles is None:
            roles = self._roles[id(b)] = bool(param_roles(b))
        if not roles:
            return {}, {}
        key = (id(b), scope.titles)
        idx = self.counts.get(key, 0)
        self.counts[key] = idx + 1
        group = self.table.occurrence(b, scope.titles, idx)
        return ({role: self.params[spec.key] for role, spec in group.items()},
                {role: spec.key for role, spec in group.items()})

    def guarded(self, b: Broadcasted, scope: Scope, compute):
        """Run ``compute()``; locate any spec or numpy error at ``b``."""
        try:
            return compute()
        except SpecError as exc:
            if exc.json_path:
                raise
            raise type(exc)(exc.message, b.path, scope.titles,
                            node_type=type(b.operator).__name__) from None
        except NUMPY_ERRORS as exc:
            raise EvaluationError(f"{type(exc).__name__}: {exc}", b.path, scope.titles,
                                  node_type=type(b.operator).__name__) from None

    def _broadcasted(self, b: Broadcasted, ins, scope: Scope, batch) -> list[Value]:
        return self.guarded(b, scope, lambda: self._apply(b, ins, scope, batch))

    def _apply(self, b: Broadcasted, ins, scope: Scope, batch) -> list[Value]:
        if len(ins) != len(b.input_weaves):
            raise EvaluationError(f"the operator takes {len(b.input_weaves)} arrays, got "
                                  f"{len(ins)}")
        nb = len(batch)
        deg = self.degree_sizes(b)
        lifted = []
        for k, v in enumerate(ins):
            try:
                lifted.append(gather(v, self.plan(b, k), nb))
            except ValueError as exc:
                raise EvaluationError(f"input {k} does not fit its weave "
                                      f"{b.input_weaves[k]}: {exc}") from None
        if isinstance(b.operator, (BlockOperator, ParaBlockOperator)):
            params, keys = {}, {}
        else:
            params, keys = self._take_params(b, scope)
        ctx = RuleContext(b, self, scope, tuple(batch), deg, params, keys)
        outs = rule_for(b.operator)(b, lifted, ctx)
        if self.perturb is not None:
            outs = [Value(self.perturb(v.values), v.live) for v in outs]
        if len(outs) != len(b.output_weaves):
            raise EvaluationError(f"the rule produced {len(outs)} arrays for "
                                  f"{len(b.output_weaves)} output weaves")
        return [self.place(b, j, v, batch, deg) for j, v in enumerate(outs)]

    def place(self, b: Broadcasted, j: int, v: Value, batch, deg) -> Value:
        """Move the degree dims of a rule result into output ``j``'s TILED positions and apply
        the emulate-mode rounding policy."""
        w = b.output_weaves[j]
        nb, r = len(batch), len(deg)
        rank = nb + r + len(w.target)
        vals = with_rank(np.asarray(v.values), rank)
        live = None if v.live is None else with_rank(v.live, rank)
        src = list(range(nb, nb + r))
        dst = [nb + p for p in w.tiled_positions]
        if src != dst:
            vals = np.moveaxis(vals, src, dst)
            if live is not None:
                live = np.moveaxis(live, src, dst)
        if self.quant == "emulate":
            dt = output_format(b, j)
            if dt is not None:
                vals = round_values(vals, dt, lambda: self._trailing(w, batch, deg), self.env)
                vals = zero_dead(vals, live)
        return Value(vals, live)

    def _trailing(self, w, batch, deg) -> int:
        if not w.shape:
            if not batch:
                raise EvaluationError("a block-scaled format on a rank-0 array")
            return batch[-1]
        last = w.shape[-1]
        return deg[-1] if last is TILED else self.env.size(last.size)
