"""The public entry points: :func:`interpret`, :class:`Interpreted`, :func:`prefix`."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ncdc.ir.datatypes import kind
from ncdc.ir.env import Env
from ncdc.ir.errors import EvaluationError, SpecError
from ncdc.ir.morphisms import Composed, Truncated
from ncdc.ir.pipeline import normalize

from .evaluate import Evaluator
from .inputs import coerce, tape_needs, tape_slots
from .params import ParamTable, build_params
from .plan import Plan, compile_plan
from .values import Value, materialise, with_rank

RECURSION_LIMIT = 20_000
"""Evaluation recurses a few frames per nesting level of the term; decoded terms nest at most
``spec.builder.MAX_DEPTH`` levels, well inside this limit."""


@contextmanager
def deep_recursion(morphism):
    """Raise the recursion limit for walking a deeply nested term; a term still too deep is an
    :class:`EvaluationError`, never a bare ``RecursionError``."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, RECURSION_LIMIT))
    try:
        yield
    except RecursionError:
        raise EvaluationError("the morphism is nested too deeply to evaluate",
                              getattr(morphism, "path", "")) from None
    finally:
        sys.setrecursionlimit(limit)


@dataclass
class Evaluation:
    """The result of one evaluation: ``outputs`` as ``Value(values, live)`` pairs (full
    shape, dead positions 0, ``live`` None when all live) in cod order, and the final ``tape``
    (slot uid -> Value)."""

    outputs: list[Value]
    tape: dict[int, Value] = field(default_factory=dict)

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(v.values for v in self.outputs)


_F64 = np.dtype(np.float64)


def _plain(x, real: bool, shape) -> bool:
    """Whether ``x`` is already what :func:`coerce` makes of a real input: a float64 array
    whose shape ends with the input's (any leading batch dims)."""
    return (real and type(x) is np.ndarray and (x.dtype is _F64 or x.dtype == np.float64)
            and x.ndim >= len(shape) and x.shape[x.ndim - len(shape):] == shape)


def _handout(v: Value, shape) -> Value:
    """A result as the caller gets it: full-shape, contiguous, writeable, its own copy."""
    if v.live is None and v.values.shape == shape:
        return Value(np.array(v.values, order="C"), None)
    return materialise(v, shape)


class Interpreted:
    """A morphism ready to evaluate under one env, parameters and quantisation mode.

    ``run(*inputs)`` returns a tuple of numpy arrays (dead positions 0) in cod order;
    ``run.evaluate(*inputs, tape=...)`` returns an :class:`Evaluation` with liveness and the
    tape. Inputs are arrays (all live) or ``(values, live)`` pairs, in dom order; any leading
    (batch) dims before an input's shape broadcast together and lead every result, as in the
    generated modules.

    The morphism is compiled into an :class:`~interpreter.plan.Plan` on the first call for each
    batch shape (:mod:`interpreter.plan`)."""

    def __init__(self, morphism, env: Env, *, params=None, quant: str = "exact", tape=None,
                 stand_in: bool = False, seed: int = 0, fuse: bool = True,
                 reading: str = "faithful"):
        if quant not in ("exact", "emulate"):
            raise ValueError(f"quant must be 'exact' or 'emulate', not {quant!r}")
        if isinstance(morphism, Truncated):
            raise SpecError("cannot interpret a truncated term; interpreter.prefix() gives the "
                            "complete leading part of a truncated composition", morphism.path)
        with deep_recursion(morphism):
            # the evaluator runs the term with the interpreter's own fusion; callers (the code
            # generator, the check tools) see the normalized term without it
            plain = normalize(morphism, reading=reading, fusion=None)
            morphism = normalize(morphism, reading=reading,
                                 fusion="bank_diagonal" if fuse else None)
            self.table = ParamTable(morphism, env)
            self.tape_needs = tape_needs(morphism)
            self.tape_slots = tape_slots(morphism)
            self._dom, self._cod = tuple(morphism.dom), tuple(morphism.cod)
        self.morphism, self.env, self.quant, self.reading = plain, env, quant, reading
        self.params = build_params(self.table.specs, env, params, seed, stand_in)
        self.stand_ins: list[str] = list(self.params.stand_ins)
        self.default_tape = dict(tape or {})
        self.seed = seed
        self._evaluator = Evaluator(morphism, env, quant=quant, table=self.table,
                                    params=self.params, seed=seed)
        self._cod_shapes = [env.sizes(a.shape) for a in self._cod]
        self._dom_plain = [(kind(a.datatype) == "real", env.sizes(a.shape)) for a in self._dom]
        self._plans: dict[tuple, Plan] = {}

    @property
    def param_specs(self):
        return self.table.specs

    @property
    def dom(self):
        return self._dom

    @property
    def cod(self):
        return self._cod

    def dom_shapes(self) -> list[tuple[int, ...]]:
        return [self.env.sizes(a.shape) for a in self.dom]

    def cod_shapes(self) -> list[tuple[int, ...]]:
        return [self.env.sizes(a.shape) for a in self.cod]

    def __call__(self, *inputs, tape=None) -> tuple[np.ndarray, ...]:
        return self.evaluate(*inputs, tape=tape).arrays

    def evaluate(self, *inputs, tape=None, observer=None, on_entry=None,
                 perturb=None) -> Evaluation:
        dom = self.dom
        if len(inputs) != len(dom):
            raise EvaluationError(f"{len(inputs)} input(s) given; the morphism takes "
                                  f"{len(dom)}: {', '.join(str(a) for a in dom)}",
                                  self.morphism.path)
        values, batch = self._inputs(inputs, dom)
        given = {**self.default_tape, **tape} if tape else self.default_tape
        start = self._tape_in(given) if given else {}
        ev = self._evaluator
        plan = self.plan(batch, plain=on_entry is not None or perturb is not None)
        ev.start(start, observer, on_entry, perturb)
        outs = plan.run(values)
        cod = self.cod
        if len(outs) != len(cod):
            raise EvaluationError(f"evaluation produced {len(outs)} arrays for a codomain of "
                                  f"{len(cod)}", self.morphism.path)
        result = [_handout(v, batch + shape) for v, shape in zip(outs, self._cod_shapes, strict=True)]
        final = {uid: materialise(v, shape)
                 for uid, (v, _nb, shape) in ev.tape.items()} if ev.tape else {}
        return Evaluation(result, final)

    def plan(self, batch: tuple[int, ...] = (), plain: bool = False) -> Plan:
        """The compiled plan for inputs with leading ``batch`` dims (compiled once; ``plain``
        for the hooks, :func:`~interpreter.plan.compile_plan`)."""
        key = (tuple(batch), plain)
        hit = self._plans.get(key)
        if hit is None:
            with deep_recursion(self.morphism):
                hit = compile_plan(self._evaluator, tuple(batch), len(self.dom), plain)
            self._plans[key] = hit
        return hit

    def _inputs(self, inputs, dom) -> tuple[list[Value], tuple[int, ...]]:
        """The inputs checked against the dom, and their broadcast leading (batch) shape; each
        value gets the batch's rank (size-1 dims where it has none)."""
        values, batch = [], ()
        for k, (x, a, (real, shape)) in enumerate(zip(inputs, dom, self._dom_plain, strict=False)):
            v = Value(x, None) if _plain(x, real, shape) else coerce(x, a, self.env,
                                                                   f"input {k}", lead=True)
            values.append(v)
            if v.values.ndim != len(shape):
                batch = None
        if batch is not None:
            return values, ()
        leads = [v.values.shape[:v.values.ndim - len(a.shape)] for v, a in zip(values, dom, strict=False)]
        try:
            batch = tuple(int(n) for n in np.broadcast_shapes(*leads))
        except ValueError:
            raise EvaluationError("the inputs' leading (batch) dims do not broadcast: "
                                  + ", ".join(str(s) for s in leads), self.morphism.path) from None
        out = []
        for v, a in zip(values, dom, strict=False):
            rank = len(batch) + len(a.shape)
            out.append(Value(with_rank(v.values, rank),
                             None if v.live is None else with_rank(v.live, rank)))
        return out, batch

    def _tape_in(self, given: dict) -> dict:
        slots = {slot.uid: (slot, arr) for slot, arr in self.tape_needs}
        by_label = {slot.label: uid for uid, (slot, _) in slots.items()}
        out = {}
        for key, x in given.items():
            uid = getattr(key, "uid", key)
            if isinstance(uid, str):
                if uid not in by_label:
                    raise EvaluationError(f"tape slot {key!r} is not read by this morphism "
                                          f"(it reads: {', '.join(sorted(by_label)) or 'none'})")
                uid = by_label[uid]
            if uid not in slots:
                continue
            slot, arr = slots[uid]
            v = coerce(x, arr, self.env, f"tape slot {slot.label!r}")
            out[uid] = (v, 0, self.env.sizes(arr.shape))
        return out


def interpret(morphism, env: Env, *, params=None, quant: str = "exact", tape=None,
              stand_in: bool = False, seed: int = 0, fuse: bool = True,
              reading: str = "faithful") -> Interpreted:
    """Prepare ``morphism`` for evaluation (docs/format.md semantics).

    ``env``: an :class:`~ir.env.Env` binding its sizes (e.g. ``spec.bind("tiny").env``;
    :func:`ncdc.interpret` binds from a preset for you). ``params``: key
    -> array, keys as :func:`ir.params.param_specs` gives them relative to ``morphism``;
    ``None`` initialises every parameter (seeded). Fixed arrays the spec defines by rule are
    computed when absent; user data (``E_cmp``, ``alpha``) must be given unless ``stand_in``
    (seeded stand-ins, listed in ``.stand_ins``). ``quant``: ``exact`` or ``emulate``
    (``QUANT_POLICY.md``). ``tape``: default tape slots (uid or label -> array). ``fuse``:
    evaluate bank Linear + diagonal View pairs as one contraction (the ``bank_diagonal`` pass of
    :func:`ir.pipeline.normalize`, run by :mod:`interpreter.fusion`); the morphism is
    normalized once, here.
    ``reading``: ``faithful`` or ``pyncd`` (pyncd's own torch lowering, :mod:`ir.readings`).
    The morphism is compiled, once per batch shape, into a flat plan that runs the operators'
    rules (:mod:`interpreter.plan`).
    """
    return Interpreted(morphism, env, params=params, quant=quant, tape=tape,
                       stand_in=stand_in, seed=seed, fuse=fuse, reading=reading)


def prefix(spec_data):
    """The complete leading part of a (possibly truncated) top-level composition: the complete
    items before the first cut one, as a ``Composed`` at the same JSON path (parameter keys are
    those of the same items under the whole data). A complete morphism is returned as is."""
    if not isinstance(spec_data, Truncated):
        return spec_data
    content = spec_data.partial.get("content")
    if spec_data.expected != "Composed" or not isinstance(content, tuple):
        raise SpecError("the truncated data is not a composition with recovered items",
                        spec_data.path)
    items = []
    for item in content:
        if isinstance(item, Truncated):
            break
        items.append(item)
    if not items:
        raise SpecError("no complete leading item survived the truncation", spec_data.path)
    return Composed(tuple(items), path=spec_data.path)
