"""How a plan runs one ``Broadcasted``: :class:`SiteSteps`, the part of the plan builder
(:mod:`interpreter.plan`) that turns a site into a step ``fn(regs)`` with everything resolved
once — gather plans (identity reads skipped), rule and kernel, one rule context, parameter
keys, placement — and its error location (the evaluator's ``guarded``)."""
from __future__ import annotations

import numpy as np
from numpy import ndarray

from ncdc.ir.errors import EvaluationError, SpecError
from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.operators import BlockOperator, ParaBlockOperator
from ncdc.ir.params import param_roles

from .context import RuleContext
from .evaluate import NUMPY_ERRORS, Scope
from .plan_demand import bank_position
from .registry import kernel_for, rule_for
from .reindex import gather
from .rules.linear import linear_where
from .values import Value

_NONE: dict = {}
"""The parameters of a site that has none (shared, never written)."""


def locate(exc, b: Broadcasted, titles):
    """The error ``exc`` raised at ``b`` as the evaluator's ``guarded`` reports it."""
    if isinstance(exc, SpecError):
        if exc.json_path:
            return exc
        return type(exc)(exc.message, b.path, titles, node_type=type(b.operator).__name__)
    return EvaluationError(f"{type(exc).__name__}: {exc}", b.path, titles,
                           node_type=type(b.operator).__name__)


class SiteSteps:
    """Step construction for ``Broadcasted`` sites; mixed into the plan builder, which
    provides ``ev``, ``plain``, ``counts``, ``origin``, ``taken``, ``demand``, ``new``,
    ``step``, ``emit`` and ``box``."""

    def located(self, b, scope, fn):
        try:
            return fn()
        except (SpecError, *NUMPY_ERRORS) as exc:
            raise locate(exc, b, scope.titles) from None

    def take_keys(self, b: Broadcasted, scope: Scope) -> tuple:
        """(role, key) pairs of this occurrence's parameters, counted as the evaluator does
        (a rebuilt site, ``origin``, as the site it was rebuilt from)."""
        site = self.origin.get(id(b), b)
        if not param_roles(site):
            return ()
        key = (id(site), scope.titles)
        idx = self.counts.get(key, 0)
        self.counts[key] = idx + 1
        group = self.ev.table.occurrence(site, scope.titles, idx)
        keys = tuple((role, spec.key) for role, spec in group.items())
        self.taken.append((site, keys))
        return keys

    def readers(self, b: Broadcasted, nb: int):
        """One function per input: ``Value -> lifted Value`` (the array itself when the read
        is an identity and the layout matches)."""
        return [_reader(self.ev.plan(b, k), nb, self.identity_layout(b, k), k,
                        b.input_weaves[k]) for k in range(len(b.input_weaves))]

    def broadcasted(self, b: Broadcasted, regs, scope: Scope, batch) -> list[int]:  # noqa: C901 - builds one run closure per fast path: single input, inline, general
        ev = self.ev
        batch = tuple(batch)
        nb = len(batch)

        def prepare():
            if len(regs) != len(b.input_weaves):
                raise EvaluationError(f"the operator takes {len(b.input_weaves)} arrays, got "
                                      f"{len(regs)}")
            return ev.degree_sizes(b), self.readers(b, nb)

        deg, readers = self.located(b, scope, prepare)
        if isinstance(b.operator, (BlockOperator, ParaBlockOperator)):
            return self.box(b, regs, scope, batch, deg, readers)
        rule = self.located(b, scope, lambda: rule_for(b.operator))
        keys = self.take_keys(b, scope)
        ctx = RuleContext(b, ev, scope, batch, deg, {}, dict(keys))
        if self.demand is not None and self.demand[2] == nb:
            t = bank_position(b, self.demand[0])
            if t is not None:
                return self.demanded(b, regs, ctx, rule, readers, keys, t, scope)
        kern = self.located(b, scope, lambda: kernel_for(b, ctx))
        placers = [self.placer(b, j, batch, deg) for j in range(len(b.output_weaves))]
        dst = self.new(len(b.output_weaves))
        src = tuple(regs)
        nout = len(b.output_weaves)
        titles = scope.titles
        pairs = tuple(zip(readers, src, strict=False))
        outs_at = tuple(zip(placers, dst, strict=False))
        take = _taker(ev.params, keys)

        def apply(lifted):
            P = take()
            if kern is not None and all(v.live is None for v in lifted):
                return [Value(y, None) for y in kern([v.values for v in lifted], P)]
            ctx.params = P
            outs = rule(b, lifted, ctx)
            if len(outs) != nout:
                raise EvaluationError(f"the rule produced {len(outs)} arrays for {nout} "
                                      "output weaves")
            return outs

        if self.plain:
            rules_only = apply

            def apply(lifted):
                outs = rules_only(lifted)
                if ev.perturb is not None:
                    outs = [Value(ev.perturb(v.values), v.live) for v in outs]
                return outs

        layouts = [self.identity_layout(b, k) for k in range(len(src))]
        ranks = [self.plain_rank(b, j, batch, deg) for j in range(nout)]
        inline = (not self.plain and kern is not None and None not in layouts
                  and None not in ranks and src)
        if inline and len(src) == 1 and nout == 1:
            (read, s0), ((put, d0),), lay0, rank0 = pairs[0], outs_at, layouts[0], ranks[0]

            def run(R):
                try:
                    x = v = R[s0]
                    if type(x) is not ndarray and x.live is None:
                        x = x.values
                    if type(x) is ndarray and x.shape[nb:] == lay0:
                        y = kern((x,), take())[0]
                        R[d0] = y if type(y) is ndarray and y.ndim == rank0 \
                            else put(Value(y, None))
                    else:
                        R[d0] = put(apply([read(v)])[0])
                except (SpecError, *NUMPY_ERRORS) as exc:
                    raise locate(exc, b, titles) from None
        elif inline:
            fast = tuple(zip(src, layouts, strict=False))

            def run(R):
                try:
                    xs = []
                    for r, lay in fast:
                        x = R[r]
                        if type(x) is not ndarray and x.live is None:
                            x = x.values
                        if type(x) is not ndarray or x.shape[nb:] != lay:
                            break
                        xs.append(x)
                    else:
                        ys = kern(xs, take())
                        for (put, r), y, rank in zip(outs_at, ys, ranks, strict=False):
                            R[r] = y if type(y) is ndarray and y.ndim == rank \
                                else put(Value(y, None))
                        return
                    outs = apply([read(R[r]) for read, r in pairs])
                    for (put, r), v in zip(outs_at, outs, strict=False):
                        R[r] = put(v)
                except (SpecError, *NUMPY_ERRORS) as exc:
                    raise locate(exc, b, titles) from None
        else:
            def run(R):
                try:
                    outs = apply([read(R[r]) for read, r in pairs])
                    for (put, r), v in zip(outs_at, outs, strict=False):
                        R[r] = put(v)
                except (SpecError, *NUMPY_ERRORS) as exc:
                    raise locate(exc, b, titles) from None

        self.step(run, src, dst)
        return dst

    def demanded(self, b, regs, ctx, rule, readers, keys, t, scope) -> list[int]:
        """A bank Linear computed only where the gate is live (falls back to its rule when
        the gate or the input carries no mask)."""
        ev = self.ev
        _A, gate, nb = self.demand
        (read,), (src,) = readers, regs
        (dst,) = self.new()
        put = self.placer(b, 0, ctx.batch, ctx.degree)
        nin = len(b.input_weaves[0].target)
        params, titles = ev.params, scope.titles
        self.demand_sites += 1

        def run(R):
            try:
                v = read(R[src])
                ctx.params = P = {role: params[key] for role, key in keys}
                g = boxed(R[gate]).live
                if g is None or v.live is not None or g.ndim != nb + 1:
                    (y,) = rule(b, [v], ctx)
                else:
                    y = linear_where(v.values, P["weight"], P.get("bias"), g, nin, t)
                R[dst] = put(y)
            except (SpecError, *NUMPY_ERRORS) as exc:
                raise locate(exc, b, titles) from None

        self.step(run, (src, gate), (dst,))
        return [dst]

    def identity_layout(self, b: Broadcasted, k: int):
        """The layout (shape after the batch dims) in which input ``k`` is read as it is, or
        None when its read is not an identity."""
        plan = self.ev.plan(b, k)
        if not plan.identity:
            return None
        return tuple(plan.amap.cod_sizes) + tuple(plan.target_sizes)

    def plain_rank(self, b: Broadcasted, j: int, batch, deg):
        """The rank of output ``j`` when placing it moves and rounds nothing (else None)."""
        w = b.output_weaves[j]
        nb, r = len(batch), len(deg)
        if self.ev.quant != "exact" or [nb + p for p in w.tiled_positions] != \
                list(range(nb, nb + r)):
            return None
        return nb + r + len(w.target)

    def placer(self, b: Broadcasted, j: int, batch, deg):
        """``Value -> Value`` in output ``j``'s layout (the evaluator's ``place``), the value
        itself when nothing moves and nothing rounds."""
        ev = self.ev
        w = b.output_weaves[j]
        nb, r = len(batch), len(deg)
        rank = nb + r + len(w.target)
        moves = [nb + p for p in w.tiled_positions] != list(range(nb, nb + r))
        if moves or ev.quant != "exact":
            return lambda v: ev.place(b, j, boxed(v), batch, deg)

        def put(v):
            if type(v) is ndarray:
                return v if v.ndim == rank else ev.place(b, j, Value(v, None), batch, deg)
            x = v.values
            if type(x) is np.ndarray and x.ndim == rank and (v.live is None or
                                                            v.live.ndim == rank):
                return v
            return ev.place(b, j, v, batch, deg)

        return put


def boxed(x) -> Value:
    """A register's content as a :class:`Value`: registers hold a plain ``ndarray`` for an
    all-live array that the fast path made (no ``Value`` built per step), else a ``Value``."""
    return Value(x, None) if type(x) is ndarray else x


def _taker(params, keys):
    """``() -> {role: array}`` of a site's parameters, read from ``params`` at each call."""
    if not keys:
        return lambda: _NONE
    if len(keys) == 1:
        ((role, key),) = keys
        return lambda: {role: params[key]}
    return lambda: {role: params[key] for role, key in keys}


def _reader(plan, nb, layout, k, weave):
    def read(v):
        try:
            return gather(boxed(v), plan, nb)
        except ValueError as exc:
            raise EvaluationError(f"input {k} does not fit its weave {weave}: {exc}") from None

    if layout is None:
        return read

    def identity(v):
        if type(v) is ndarray:
            return Value(v, None) if v.shape[nb:] == layout else read(v)
        if v.values.shape[nb:] == layout and (v.live is None or v.live.ndim == v.values.ndim):
            return v
        return read(v)

    return identity
