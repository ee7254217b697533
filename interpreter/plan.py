"""An evaluation compiled once: :class:`Plan`, a flat sequence of steps over numbered registers.

:func:`compile_plan` walks the root morphism once, for one batch shape, with the reference
:class:`~interpreter.evaluate.Evaluator` as its toolbox, and resolves everything that does not
depend on the data:

* wiring: ``Rearrangement`` and ``ProductOfMorphisms`` become register renaming (no step);
  ``Composed`` and ``Block`` bodies (unrolled ``repetition`` times, parameter titles
  ``title@i``) become consecutive steps; boxes (``BlockOperator``, ``ParaBlockOperator``) are
  inlined with their body lifted over the box's ``(*batch, *degree)``;
* each ``Broadcasted``: its gather plans (a read that is the array itself is skipped by one
  shape comparison), its rule, one :class:`~interpreter.context.RuleContext` (which memoises
  sizes and constants as numbers), its parameter keys (occurrence counted once, here), the
  placement of its results (nothing to do when the degree already leads and the mode is
  ``exact``);
* the all-live fast path: an operator with a kernel (:func:`interpreter.registry.kernel`)
  runs it on the plain arrays when every input is live and read as it is (no ``Value``
  plumbing, no masks), its rule otherwise;
* the bank ``Linear`` + diagonal ``View`` fusion (:mod:`interpreter.fusion`), and demand on
  sparse axes (:mod:`interpreter.plan_demand`: routed experts compute only routed rows;
  over leading batch dims in row chunks, or, in ``exact`` mode where the rows take more
  than one chunk, experts first, :mod:`interpreter.plan_experts`: each routed expert once,
  over its rows, so its weights are read once a call);
* register lifetimes: a register is cleared after its last reader, so peak memory is that of
  the recursive evaluator.

This is the interpreter's one evaluator: every operator's numpy meaning is its rule
(:mod:`interpreter.rules`; a kernel is the rule's all-live case with its setup done once), and
the plan is a way of running the rules. Steps run in the term's order, so parameter reads, the
tape, the hooks and the error locations (JSON path and block titles of the ``Broadcasted``
where an error arose) follow the term; structural errors (arity, truncated terms, a box whose
block does not fit) are raised when the plan is compiled, i.e. on the first call. The hooks
``on_entry`` and ``perturb`` run on a *plain* plan (:func:`compile_plan`), which has a step
before each block body and perturbs each operator's results.
"""
from __future__ import annotations

import math

import numpy as np

from ncdc.ir.errors import EvaluationError, SpecError, SpecTypeError
from ncdc.ir.morphisms import Broadcasted, Composed, Drop, Grab, ParaWrap, ProductOfMorphisms
from ncdc.ir.operators import ParaBlockOperator
from ncdc.ir.params import repetitions
from ncdc.ir.pipeline import source
from ncdc.ir.rewrites import BankDiagonal
from ncdc.ir.traverse import Descend, Visitor, scan_length, traverse
from ncdc.ir.walk import by_kind

from . import fusion, plan_experts, plan_scan
from .evaluate import NUMPY_ERRORS, Evaluator, Scope, unevaluable
from .plan_demand import gated_contraction, position_wise, widest_site
from .plan_steps import SiteSteps, boxed, locate
from .values import Value


class Plan:
    """Straight-line steps ``fn(regs)`` with the registers each clears afterwards; the root's
    inputs are registers ``0..n-1``, its outputs ``outputs``."""

    def __init__(self, steps, n_regs: int, n_inputs: int, outputs: list[int],
                 demand_sites: int = 0, chunk_rows: tuple[int, ...] = (),
                 expert_rows: tuple[int, ...] = ()):
        self.n_regs, self.n_inputs, self.outputs = n_regs, n_inputs, outputs
        self.demand_sites = demand_sites
        self.chunk_rows = chunk_rows
        """Rows per chunk of each chunked gated part (``_Builder.chunked``)."""
        self.expert_rows = expert_rows
        """Rows per run of each gated part run experts first (``_Builder.by_expert``)."""
        self.steps = _with_lifetimes(steps, n_inputs, outputs)

    def __len__(self) -> int:
        return len(self.steps)

    def run(self, inputs: list) -> list:
        """Run the steps on the root's input values; floating-point warnings are silenced
        for the whole run (NaN and inf are values, as in every rule)."""
        regs = list(inputs) + [None] * (self.n_regs - self.n_inputs)
        with np.errstate(all="ignore"):
            for fn, frees in self.steps:
                fn(regs)
                for r in frees:
                    regs[r] = None
        return [boxed(regs[r]) for r in self.outputs]


CHUNK_BYTES = 4 << 20
"""The budget of a gated part's chunk (:meth:`_Builder.chunked`): its widest array
(:func:`~interpreter.plan_demand.widest_site`, 8 bytes an element) holds at most this much, so
the part's peak is bounded whatever the token count (rows from this budget, at least one).
Experts first, the widest array is one expert's (``A`` of size 1): an expert's rows run in
one piece unless they exceed it."""
CHUNK_ROWS: int | None = None
"""Rows per chunk, overriding :data:`CHUNK_BYTES` (tests)."""


def _budget(terms, ev, per_row: int) -> int:
    """Rows per chunk of ``terms`` (:data:`CHUNK_ROWS`, else from :data:`CHUNK_BYTES` and their
    widest array, ``per_row`` lifted positions a row)."""
    row_bytes = 8 * per_row * max(max(widest_site(t, ev) for t in terms), 1)
    return CHUNK_ROWS or max(1, CHUNK_BYTES // row_bytes)


def _rows(v: Value, start: int, stop: int) -> Value:
    """Positions ``start:stop`` of the first (batch) dim of ``v`` (a size-1 dim stays)."""
    x, live = v.values, v.live
    return Value(x if x.shape[0] == 1 else x[start:stop],
                 live if live is None or live.shape[0] == 1 else live[start:stop])


def _stacked(parts: list[Value], n: int, rows: int) -> Value:
    """Chunk results of ``rows`` positions joined along the first dim (``n`` positions in
    all)."""
    sizes = [min(rows, n - s) for s in range(0, n, rows)]
    tail = np.broadcast_shapes(*(p.values.shape[1:] for p in parts))
    vals = np.concatenate([np.broadcast_to(p.values, (m,) + tail) for p, m in zip(parts, sizes, strict=False)])
    if all(p.live is None for p in parts):
        return Value(vals, None)
    live = np.concatenate([np.broadcast_to(True if p.live is None else p.live, (m,) + tail)
                           for p, m in zip(parts, sizes, strict=False)])
    return Value(vals, None if live.all() else live)


def _with_lifetimes(steps, n_inputs, outputs):
    """(fn, registers to clear after it) per step: each register after its last reader (or
    after its writer when nothing reads it), never an output."""
    last = {}
    for i, (_fn, reads, writes) in enumerate(steps):
        for r in writes:
            last.setdefault(r, i)
        for r in reads:
            last[r] = i
    keep = set(outputs)
    frees = [[] for _ in steps]
    for r, i in last.items():
        if r not in keep:
            frees[i].append(r)
    return [(fn, tuple(f)) for (fn, _r, _w), f in zip(steps, frees, strict=True)]


def compile_plan(ev, batch: tuple[int, ...], n_inputs: int, plain: bool = False) -> Plan:
    """The plan of ``ev.root`` for inputs with leading ``batch`` dims; ``plain``: for the
    per-call hooks ``on_entry`` and ``perturb`` (every operator by its rule, each result
    perturbed where ``ev.perturb`` is set; no demand, no row chunks)."""
    b = _Builder(ev, plain)
    regs = list(range(n_inputs))
    b.n = n_inputs
    outs = traverse(ev.root, regs, _Emit(b, tuple(batch)))
    return Plan(b.steps, b.n, n_inputs, outs, b.demand_sites, tuple(b.chunk_rows),
                tuple(b.expert_rows))


class _Builder(SiteSteps):
    def __init__(self, ev, plain: bool = False):
        self.ev = ev
        self.plain = plain
        self.steps: list = []
        self.n = 0
        self.counts: dict = {}
        self.demand = None
        """(A, gate register, batch rank) while emitting a part read only where the gate is
        live (:mod:`interpreter.plan_demand`)."""
        self.demand_sites = 0
        self.chunk_rows: list[int] = []
        """Rows per chunk of each chunked gated part (:meth:`chunked`)."""
        self.expert_rows: list[int] = []
        """Rows per run of each gated part run experts first (:meth:`by_expert`)."""
        self.origin: dict = {}
        """``{id(site): site it was rebuilt from}`` (a narrowed part: :meth:`by_expert`)."""
        self.taken: list = []
        """``(site, keys)`` of every parameter occurrence taken (:meth:`take_keys`)."""
        self.scan_counts: dict = {}
        """``{id(scan): occurrence counts before its step's first iteration}``
        (:func:`plan_scan.same_occurrence`)."""

    def new(self, k: int = 1) -> list[int]:
        out = list(range(self.n, self.n + k))
        self.n += k
        return out

    def step(self, fn, reads, writes):
        self.steps.append((fn, tuple(reads), tuple(writes)))

    # -------------------------------------------------------------- structure
    def emit(self, m, regs: list[int], scope: Scope, batch) -> list[int]:
        """Emit the steps of ``m`` on registers ``regs`` (:class:`_Emit`); its result
        registers. ``scope``: the parameter-key titles around ``m`` and the segments of its
        level."""
        return traverse(m, regs, _Emit(self, tuple(batch)), keys=scope.titles,
                        segs=scope.segs)

    def could_gate(self, items, i, batch) -> bool:
        """Whether :meth:`gated` may apply at ``items[i]`` (what does not need registers)."""
        return (not self.plain and (self.ev.quant == "exact" or bool(batch))
                and self.demand is None and i + 1 < len(items)
                and isinstance(items[i], ProductOfMorphisms)
                and gated_contraction(items[i + 1]) is not None)

    def gated(self, items, i, regs, scope, batch):
        """Emit ``items[i]`` with demand on a sparse axis when it is the product feeding a
        gated contraction ``items[i + 1]`` (:mod:`interpreter.plan_demand`): (registers, items
        emitted), else None. Over leading batch dims, the gated part and the contraction run
        in row chunks (:meth:`chunked`); in ``emulate`` mode only that (no demand: the bank
        Linears keep their rules and rounding)."""
        m = items[i]
        exact = self.ev.quant == "exact"
        if (self.plain or not (exact or batch) or self.demand is not None or i + 1 >= len(items)
                or not isinstance(m, ProductOfMorphisms)):
            return None
        found = gated_contraction(items[i + 1])
        if found is None:
            return None
        kg, ky, A = found
        starts, at = [], 0
        for part in m.content:
            starts.append(at)
            at += len(part.cod)
        if at != len(items[i + 1].input_weaves):
            return None
        owner = [next(j for j in range(len(starts) - 1, -1, -1) if starts[j] <= k)
                 for k in (kg, ky)]
        pg, py = owner
        part_y = m.content[py]
        if pg >= py or len(part_y.cod) != 1 or not position_wise(part_y, A):
            return None
        if not exact and py != len(m.content) - 1:
            return None
        self.ev.arity(m, regs)
        out, at = [], 0
        for j, part in enumerate(m.content):
            k = len(part.dom)
            if j == py and batch and j == len(m.content) - 1:
                return self.chunked(part, items[i + 1], regs[at:at + k], out[kg], kg, A,
                                    scope, batch), 2
            if j == py:
                self.demand = (A, out[kg], len(batch))
                try:
                    out.extend(self.emit(part, regs[at:at + k], scope, batch))
                finally:
                    self.demand = None
            else:
                out.extend(self.emit(part, regs[at:at + k], scope, batch))
            at += k
        return out, 1

    def chunked(self, part, contraction, operands, gate, kg, A, scope, batch) -> list[int]:
        """The gated ``part`` (demand on ``A``) and its ``contraction`` as one step, over
        chunks of rows of the first batch dim (:func:`_budget` rows): lifted values are
        independent along batch dims, and only a chunk of the part's arrays (the experts'
        ``[x, e, m]`` output) is alive at a time; whole while an observer watches (it sees
        whole blocks). Where that takes more than one chunk, each of which would read every
        routed expert's weights, ``exact`` mode runs experts first instead
        (:meth:`by_expert`: per position of ``A`` live in some row, over those rows). In one
        chunk the part reads each routed expert's weights once already, at less cost per
        expert (one matmul each, not a narrowed plan's steps)."""
        ev = self.ev
        exact = ev.quant == "exact"
        counts = dict(self.counts)
        plan, res, _ = self.subplan(part, contraction, kg, A if exact else None, scope, batch)
        dst = self.new(len(res))
        src = tuple(operands) + (gate,)
        n = batch[0]
        rows = _budget((part, contraction), ev, math.prod(batch[1:]))
        self.chunk_rows.append(rows)
        by_expert = self.by_expert(part, contraction, kg, A, scope, batch, counts) \
            if exact else None

        def run(R):
            ins = [boxed(R[r]) for r in src]
            outs = None
            if by_expert is not None and ev.observer is None and n > rows:
                outs = by_expert(ins)
            if outs is None and (ev.observer is not None or n <= rows):
                outs = plan.run(ins)
            elif outs is None:
                runs = [plan.run([_rows(v, s, s + rows) for v in ins])
                        for s in range(0, n, rows)]
                outs = [_stacked([r[j] for r in runs], n, rows) for j in range(len(res))]
            for r, v in zip(dst, outs, strict=False):
                R[r] = v

        self.step(run, src, dst)
        return dst

    def subplan(self, part, contraction, kg, A, scope, batch, ev=None, origin=None):
        """A plan of ``part`` then ``contraction`` (inputs: the part's operands, then the
        gate), demand on ``A`` unless None; and its result registers."""
        sub = _Builder(ev or self.ev)
        sub.counts = self.counts                  # occurrences counted in evaluation order
        sub.origin = origin or {}
        k = len(part.dom)
        sub.n = k + 1
        if A is not None:
            sub.demand = (A, k, len(batch))
        y = sub.emit(part, list(range(k)), scope, batch)
        sub.demand = None
        c_in = [k, k]
        c_in[1 - kg] = y[0]
        res = sub.emit(contraction, c_in, scope, batch)
        if origin is None:
            self.demand_sites += sub.demand_sites
            self.chunk_rows += sub.chunk_rows
        self.expert_rows += sub.expert_rows
        return Plan(sub.steps, sub.n, k + 1, res, sub.demand_sites), res, sub.taken

    def by_expert(self, part, contraction, kg, A, scope, batch, counts):
        """``ins -> [result]`` running ``part ; contraction`` experts first
        (:func:`~interpreter.plan_experts.run_by_position`): compiled once more with ``A``
        of size 1 (:func:`~interpreter.plan_experts.narrowed`), its rows the lifted positions
        flattened, its parameter occurrences counted from ``counts`` (as the row plan's), the
        parameters carrying ``A`` sliced at the expert run. None where a parameter of another
        kind than ``Linear`` carries ``A``, or the narrowed part does not compile."""
        ev = self.ev
        (n_part, n_con), origin = plan_experts.narrowed((part, contraction), A)
        params = plan_experts.SlicedParams(ev.params, {})
        sub_ev = Evaluator(n_part, ev.env, quant="exact", table=ev.table, params=params,
                           seed=ev.seed)
        segs = dict(scope.segs)
        segs.update({new: scope.segs[id(old)] for new, old in origin.items()
                     if id(old) in scope.segs})
        after, self.counts = self.counts, dict(counts)
        try:
            plan, _, taken = self.subplan(n_part, n_con, kg, None, Scope(scope.titles, segs),
                                          (math.prod(batch),), sub_ev, origin)
        except SpecError:           # compiled whole (the row plan) it did not fail: keep that
            return None
        finally:
            self.counts = after
        for site, keys in taken:
            pos = plan_experts.param_slices(site, A)
            if pos is None:
                return None
            params.slices.update({key: pos[role] for role, key in keys if role in pos})
        params.keys = tuple(dict.fromkeys(key for _site, keys in taken for _role, key in keys))
        rows = _budget((n_part, n_con), sub_ev, 1)
        self.expert_rows.append(rows)
        shape = ev.env.sizes(contraction.cod[0].shape)
        batch = tuple(batch)

        # the narrowed terms live as long as the step: the sub-evaluator's caches key by id
        def run(ins, terms=(n_part, n_con)):
            out = plan_experts.run_by_position(plan, params, ins[:-1], ins[-1], batch,
                                               shape, rows)
            return None if out is None else [out]

        return run

    def tape_read(self, slot, batch, path="") -> int:
        ev = self.ev
        (dst,) = self.new()
        batch = tuple(batch)

        def read(R):
            R[dst] = ev.tape_read(slot, batch, path)

        self.step(read, (), (dst,))
        return dst

    def tape_write(self, slot, src: int, batch, shape) -> None:
        ev = self.ev
        batch, shape = tuple(batch), tuple(shape)

        def write(R):
            ev.tape_write(slot, boxed(R[src]), batch, shape)

        self.step(write, (src,), ())

    # ------------------------------------------------------------ broadcasted
    def box(self, b: Broadcasted, regs, scope, batch, deg, readers) -> list[int]:
        """A box inlined: its inputs lifted, its block's body over ``(*batch, *degree)``, its
        results placed."""
        ev = self.ev
        op = b.operator
        lead = tuple(batch) + tuple(deg)
        para = isinstance(op, ParaBlockOperator)
        ng = len(op.grabs) if para else 0
        block = op.block
        if len(regs) != ng + len(block.dom):
            msg = (f"the box has {len(regs)} inputs for {ng} grabs and {len(block.dom)} block "
                   "operands" if para else
                   f"the box has {len(regs)} inputs but its block takes {len(block.dom)}")
            raise locate(EvaluationError(msg), b, scope.titles)
        lifted = self.new(len(regs))
        titles = scope.titles
        self.step(_moves(tuple(zip(readers, regs, lifted, strict=False)), b, titles), regs, lifted)
        for g, r in zip(op.grabs if para else (), lifted[:ng], strict=False):
            self.tape_write(g.tape, r, lead, ev.env.sizes(g.size.shape))
        results = self.emit(block, lifted[ng:], scope, lead)
        if para:
            results = list(results) + [self.tape_read(d.tape, lead) for d in op.drops]
        nout = len(b.output_weaves)
        if len(results) != nout:
            raise locate(EvaluationError(f"the rule produced {len(results)} arrays for "
                                          f"{nout} output weaves"), b, titles)
        dst = self.new(nout)
        placers = [self.placer(b, j, batch, deg) for j in range(nout)]
        if self.plain:                      # a box's results are an operator's: perturbed
            placers = [_perturbed(ev, put) for put in placers]
        self.step(_moves(tuple(zip(placers, results, dst, strict=False)), b, titles), results, dst)
        return dst

    def fused(self, lin, view, regs, scope, batch) -> list[int]:
        ev = self.ev
        keys = self.take_keys(lin, scope)
        (dst,) = self.new()
        batch = tuple(batch)
        src = tuple(regs)

        def run(R):
            P = ev.params
            params = {role: P[key] for role, key in keys}
            R[dst] = fusion.linear_then_diagonal(ev, lin, view, [boxed(R[r]) for r in src], scope,
                                                 batch, params)[0]

        self.step(run, src, (dst,))
        return [dst]

class _Emit(Visitor):
    """Wire values are register ids; each hook appends the steps of its node to the
    :class:`_Builder` (operators: :meth:`SiteSteps.broadcasted`, boxes inlined there; blocks:
    the ``on_entry`` step on a plain plan, the body per iteration with keys ``title@i``, the
    observer step; the tape: read and write steps). A ``Composed`` is answered here: a bank
    ``Linear`` + diagonal ``View`` is fused, a gated part and its contraction are emitted with
    demand (:meth:`_Builder.gated`), every other item is descended into."""

    leaves = (Composed, ParaWrap, Grab, Drop)

    def __init__(self, b: _Builder, batch: tuple):
        self.b, self.ev, self.batch = b, b.ev, batch

    def leaf(self, m, regs, scope):
        return by_kind(_LEAVES, m)(self, m, regs, scope)

    # ----------------------------------------------------------------- leaves
    def composed(self, m, regs, scope):
        if isinstance(m, BankDiagonal) and fusion.applies(m, self.ev):
            return self.b.fused(m.linear, m.view, regs, _keyed(scope), self.batch)
        if not m.content:
            raise SpecTypeError("empty composition", m.path, scope.keys)
        return self.items(m.content, 0, regs, scope)

    def items(self, items, i, regs, scope) -> Descend:
        """``items[i:]`` on ``regs``: descended into up to the next gated part."""
        j = next((k for k in range(i, len(items)) if self.b.could_gate(items, k, self.batch)),
                 len(items))
        if j == len(items):
            return Descend(tuple((f".content[{k}]", items[k]) for k in range(i, j)), regs)

        def gate(regs):
            gated = self.b.gated(items, j, regs, _keyed(scope), self.batch)
            if gated is None:
                return Descend(((f".content[{j}]", items[j]),), regs,
                               then=lambda out: self.items(items, j + 1, out, scope)
                               if j + 1 < len(items) else out)
            regs, used = gated
            return self.items(items, j + used, regs, scope) if j + used < len(items) else regs
        return Descend(tuple((f".content[{k}]", items[k]) for k in range(i, j)), regs,
                       then=gate)

    def parawrap(self, m: ParaWrap, regs, scope):
        b, ev = self.b, self.ev
        ev.arity(m, regs)
        operands, it = [], iter(regs)
        for slot, _arr in zip(m.grabs, m.body.dom, strict=True):
            operands.append(b.tape_read(slot, self.batch, m.path) if slot is not None
                            else next(it))

        def drops(results):
            out = []
            for slot, arr, r in zip(m.drops, m.body.cod, results, strict=True):
                if slot is None:
                    out.append(r)
                else:
                    b.tape_write(slot, r, self.batch, ev.env.sizes(arr.shape))
            return out
        return Descend(((".body", m.body),), operands, then=drops)

    def grab_leaf(self, m: Grab, regs, scope):
        return [self.b.tape_read(m.tape, self.batch, m.path)]

    def drop_leaf(self, m: Drop, regs, scope):
        self.ev.arity(m, regs)
        self.b.tape_write(m.tape, regs[0], self.batch, self.ev.env.sizes(m.size.shape))
        return []

    # ------------------------------------------------------------------ hooks
    def operator(self, node, regs, scope):
        return self.b.broadcasted(node, regs, _keyed(scope), self.batch)

    box = operator                           # inlined by SiteSteps.broadcasted

    def rearrange(self, node, regs, scope):
        self.ev.arity(node, regs)
        return [regs[k] for k in node.mapping]

    def split(self, node, regs, scope) -> None:
        self.ev.arity(node, regs)

    def repetitions(self, blk, scope) -> int:
        reps = repetitions(blk, self.ev.env)
        if reps > 1 and len(blk.dom) != len(blk.cod):
            raise SpecTypeError(f"block {blk.title!r} repeats {reps} times but its domain and "
                                "codomain differ", blk.path, scope.keys)
        return reps

    def enter_block(self, blk, regs, scope) -> None:
        ev, ins, titles = self.ev, list(regs), scope.keys
        shown = source(self.b.origin.get(id(blk), blk))   # the hooks see the spec's block

        def enter(R, blk=shown, batch=self.batch):
            if ev.on_entry is not None:
                ev.on_entry(blk, titles, [boxed(R[r]) for r in ins], batch)

        if self.b.plain:
            self.b.step(enter, ins, ())

    def leave_block(self, blk, regs, scope) -> None:
        ev, outs, titles = self.ev, list(regs), scope.keys
        shown = source(self.b.origin.get(id(blk), blk))

        def observe(R, blk=shown, batch=self.batch):
            if ev.observer is not None:
                ev.observer(blk, titles, [boxed(R[r]) for r in outs], batch)

        self.b.step(observe, outs, ())

    def scan_steps(self, node, scope) -> int:
        return scan_length(node, self.ev.env.size(node.n), scope.path)

    def scan_iteration(self, node, step, scope) -> None:
        plan_scan.same_occurrence(self.b, node, step)

    def scan_slice(self, node, k, reg, step, scope):
        return plan_scan.slice_at(self.b, reg, step, node.slice_dim(k))

    def scan_stack(self, node, regs, scope):
        return plan_scan.stack(self.b, regs)

    def truncated(self, node, regs, scope):
        raise unevaluable(node, scope.keys)

    stride = unknown = truncated


_LEAVES = {Composed: _Emit.composed, ParaWrap: _Emit.parawrap, Grab: _Emit.grab_leaf,
           Drop: _Emit.drop_leaf}
"""What :meth:`_Emit.leaf` does for each of its leaves (:func:`ir.walk.by_kind`)."""


def _keyed(scope) -> Scope:
    """The interpreter's parameter-key scope of a traversal scope."""
    return Scope(scope.keys, scope.segs)


def _perturbed(ev, put):
    """``put`` after ``ev.perturb`` (where set) replaced the values."""
    def run(v):
        if ev.perturb is None:
            return put(v)
        v = boxed(v)
        return put(Value(ev.perturb(v.values), v.live))

    return run


def _moves(moves, b, titles):
    """A step that runs ``R[d] = f(R[s])`` for each ``(f, s, d)`` of ``moves`` (reads into a
    box, placements out of it); failures are located at the box ``b``."""
    def run(R):
        try:
            for f, s, d in moves:
                R[d] = f(R[s])
        except (SpecError, *NUMPY_ERRORS) as exc:
            raise locate(exc, b, titles) from None

    return run

