"""The state one interpreted morphism is evaluated with: :class:`Evaluator`.

The one evaluator is the compiled plan (:mod:`interpreter.plan`), which walks the term once and
runs each operator's rule (:mod:`interpreter.rules`, the only statement of its numpy meaning).
What the plan's steps share lives here: the env, mode, parameter table and arrays; the
per-call tape (one dict ``slot uid -> value``: ``ParaWrap`` grabs/drops, free ``Grab``/``Drop``
and ``ParaBlockOperator`` ports) and hooks; and, cached across calls, each ``Broadcasted``'s
gather plans (its inputs read through their reindexings into ``(*batch, *degree, *target)``,
:func:`interpreter.reindex.gather`), degree sizes, lowered formulas and block segments, and the
placement of a rule's results (degree dims into the output weave's TILED positions, then the
emulate-mode rounding of ``QUANT_POLICY.md``).

Errors from user data are :class:`~ir.errors.EvaluationError` with the JSON path and the block
titles of the ``Broadcasted`` where they arose (:meth:`Evaluator.guarded`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ncdc.ir.arrays import TILED
from ncdc.ir.errors import EvaluationError, SpecError, SpecTypeError, TruncatedError
from ncdc.ir.morphisms import Broadcasted, StrideMorphism, Truncated

from .formulas import lower
from .reindex import GatherPlan, affine_map
from .rounding import output_format, round_values
from .values import Value, with_rank, zero_dead

NUMPY_ERRORS = (ValueError, IndexError, TypeError, ArithmeticError, KeyError)


def unevaluable(m, titles) -> SpecError:
    """The typed error for a term that is no function on arrays: a cut term, an index map, or
    an unknown kind."""
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
    """The evaluation state of one root morphism under one env (see the module docstring).
    Not thread-safe (the tape and the hooks are per call)."""

    def __init__(self, root, env, *, quant: str, table, params: dict, seed: int = 0):
        if quant not in ("exact", "emulate"):
            raise ValueError(f"quant must be 'exact' or 'emulate', not {quant!r}")
        self.root, self.env, self.quant = root, env, quant
        self.table, self.params = table, params
        self.seed = seed
        self._rng = None
        self.observer = None
        self.on_entry = None
        self.perturb = None
        self.tape: dict[int, tuple[Value, int, tuple[int, ...]]] = {}
        self._plans: dict = {}
        self._formulas: dict = {}
        self._degrees: dict = {}

    # ------------------------------------------------------------------ entry
    def start(self, tape: dict | None = None, observer=None, on_entry=None,
              perturb=None) -> None:
        """Reset the per-evaluation state: the tape, hooks, generator.
        ``observer(block, titles, outputs, batch)`` after and ``on_entry(block, titles, inputs,
        batch)`` before each block body, where given; ``perturb(values)`` replaces every
        operator result's values (error injection: ``ncdc.verify.tolerance``)."""
        self.tape = dict(tape or {})
        self.observer = observer
        self.on_entry = on_entry
        self.perturb = perturb
        self._rng = None

    @property
    def rng(self) -> np.random.Generator:
        """A generator seeded per evaluation (for operators that sample; none in the seed)."""
        if self._rng is None:
            self._rng = np.random.default_rng(self.seed)
        return self._rng

    def arity(self, m, ins):
        """Raise unless ``ins`` holds one array (or register) per array of ``m``'s domain."""
        if len(ins) != len(m.dom):
            raise EvaluationError(f"{type(m).__name__} takes {len(m.dom)} arrays, got "
                                  f"{len(ins)}", m.path, node_type=type(m).__name__)

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
