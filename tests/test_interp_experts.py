"""Experts first (``interpreter.plan_experts``): in ``exact`` mode a plan runs the routed
experts one at a time over the rows routed to each, so every routed expert's weights are read
once per call (counted by a spy on the matrix products) and an unrouted expert's never; the
result is the tree walk's (to rounding), over any leading batch dims."""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import sympy

from ncdc import interpreter
from ncdc.interpreter import plan as plan_module
from ncdc.interpreter import plan_experts
from ncdc.interpreter.values import Value
from ncdc.ir import Linear
from ncdc.ir.axes import RawAxis, SparseAxis
from ncdc.ir.names import Name
from tests.conftest import loaded
from tests.oracles.ir_build import R, bc, rearr, weave

SPEC = loaded()
ENV = SPEC.bind("tiny", sizes={"e": 16, "k": 4}).env
BANKS = ("W^{G}", "W^{U}", "W^{D}")


class Spy(np.ndarray):
    """A weight whose views record each matrix product they enter: (key, expert), the expert
    read off the view's offset along axis 1 (the experts' axis of every bank here)."""

    log: ClassVar[list] = []

    def __array_finalize__(self, obj):
        self.key = getattr(obj, "key", None)
        self.origin = getattr(obj, "origin", None)
        self.stride = getattr(obj, "stride", None)

    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        if ufunc is np.matmul:
            for x in inputs:
                if isinstance(x, Spy):
                    offset = x.__array_interface__["data"][0] - x.origin
                    Spy.log.append((x.key, offset // x.stride))
        plain = [x.view(np.ndarray) if isinstance(x, Spy) else x for x in inputs]
        if "out" in kw:
            kw["out"] = tuple(o.view(np.ndarray) if isinstance(o, Spy) else o
                              for o in kw["out"])
        return getattr(ufunc, method)(*plain, **kw)


def _spied(run, e: int):
    """``run`` with its bank weights replaced by spies (the plan reads its parameters from
    ``run.params`` at each call)."""
    params = run.params
    for key, arr in list(params.items()):
        if any(f"/{name}." in key for name in BANKS):
            assert arr.shape[1] == e and arr.flags.c_contiguous, (key, arr.shape)
            spy = arr.view(Spy)
            spy.key, spy.origin, spy.stride = key, arr.__array_interface__["data"][0], \
                arr.strides[1]
            params[key] = spy
    return run


def _routed(run, x) -> set[int]:
    """The experts some row routes to (the gate's live positions, seen by an observer)."""
    seen = {}

    def observe(blk, titles, outs, batch):
        seen[titles[-1]] = outs

    run.evaluate(x, observer=observe)
    live = seen["Expert Gate"][0].live
    return set(np.flatnonzero(live.reshape(-1, live.shape[-1]).any(0)).tolist())


def _count_runs(monkeypatch) -> list:
    """A list that gets one entry per experts-first call (``run_by_position``)."""
    calls = []
    real = plan_experts.run_by_position

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(plan_experts, "run_by_position", counted)
    return calls


def _moe(seed=2):
    moe = SPEC.block("Mixture of Experts")
    planned = interpreter.interpret(moe, ENV, seed=seed)
    params = {k: np.array(v, copy=True) for k, v in planned.params.items()}
    bias = np.full(16, -1e3)
    bias[:10] = 0.0                                   # experts 10-15 never routed
    params["Mixture of Experts/Expert Gate/bias.weight"] = bias
    return moe, params


def test_each_routed_expert_weight_enters_one_product_per_call(monkeypatch):
    """With a budget that splits 64 tokens into 16 row chunks (4 rows each) but holds every
    expert's routed rows, each routed expert's slice of W^G, W^U and W^D enters exactly one
    matrix product per call; an unrouted expert's none. (Row chunks read every routed
    expert's weights once per chunk.)"""
    moe, params = _moe()
    _f, e, d = params["Mixture of Experts/Routed Experts/W^{D}.weight"].shape
    monkeypatch.setattr(plan_module, "CHUNK_BYTES", 4 * 8 * e * d)
    run = _spied(interpreter.interpret(moe, ENV, params=params), e)
    ref = interpreter.interpret(moe, ENV, params=params)
    x = np.random.default_rng(4).standard_normal((64, d))
    assert run.plan((64,)).chunk_rows == (4,)
    routed = _routed(run, x)
    assert routed and routed <= set(range(10))
    calls = _count_runs(monkeypatch)
    Spy.log = []
    got = run.evaluate(x).outputs[0]
    assert calls == [1]
    counts = {}
    for key, a in Spy.log:
        counts[key, a] = counts.get((key, a), 0) + 1
    keys = {key for key in params if any(f"/{name}." in key for name in BANKS)}
    assert len(keys) == 3
    want = {(key, a): 1 for key in keys for a in routed}
    assert counts == want
    np.testing.assert_allclose(got.values, ref.evaluate(x, on_entry=_DENSE).outputs[0].values, rtol=1e-12,
                               atol=1e-14)


def test_rows_in_one_chunk_run_as_one_chunk(monkeypatch):
    """Where the rows fit one chunk (the default budget, 7 tokens) the part runs as one
    chunk, not experts first: it reads each routed expert's weights once already."""
    calls = _count_runs(monkeypatch)
    moe, params = _moe()
    _f, e, d = params["Mixture of Experts/Routed Experts/W^{D}.weight"].shape
    run = _spied(interpreter.interpret(moe, ENV, params=params), e)
    x = np.random.default_rng(7).standard_normal((7, d))
    routed = _routed(run, x)
    Spy.log = []
    run(x)
    assert calls == []
    assert sorted(Spy.log) == sorted((key, a) for key in {k for k, _ in Spy.log}
                                     for a in routed)
    assert len({k for k, _ in Spy.log}) == 3


def test_an_expert_over_the_budget_runs_in_row_chunks(monkeypatch):
    """Rows per run from the budget and the narrowed part's widest row (``max(f, d)``: one
    expert's ``[f]`` hidden and ``[d]`` output); an expert with more routed rows than that
    runs in ``ceil(rows / budget)`` products; the values do not change."""
    moe, params = _moe()
    f, e, d = params["Mixture of Experts/Routed Experts/W^{D}.weight"].shape
    x = np.random.default_rng(5).standard_normal((40, d))
    whole = interpreter.interpret(moe, ENV, params=params)(x)[0]
    monkeypatch.setattr(plan_module, "CHUNK_BYTES", 3 * 8 * max(f, d) + 7)
    run = _spied(interpreter.interpret(moe, ENV, params=params), e)
    assert run.plan((40,)).expert_rows == (3,)
    seen = {}
    run.evaluate(x, observer=lambda blk, titles, outs, batch: seen.setdefault(titles[-1],
                                                                               outs))
    rows = np.broadcast_to(seen["Expert Gate"][0].live, (40, e)).sum(0)
    Spy.log = []
    (got,) = run(x)
    key = "Mixture of Experts/Routed Experts/W^{G}.weight"
    for a in range(e):
        assert sum(1 for k, b in Spy.log if (k, b) == (key, a)) == -(-rows[a] // 3)
    np.testing.assert_allclose(got, whole, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("batch", [(3, 5), (2, 3, 2), (6, 1)])
def test_experts_first_over_several_batch_dims(batch, monkeypatch):
    """Leading batch dims are flattened into rows and restored: the dense evaluation's result (one
    row a chunk: the row chunks would be several, so the experts run first, one row a run)."""
    monkeypatch.setattr(plan_module, "CHUNK_ROWS", 1)
    calls = _count_runs(monkeypatch)
    moe, params = _moe()
    d = params["Mixture of Experts/Routed Experts/W^{D}.weight"].shape[2]
    run = interpreter.interpret(moe, ENV, params=params)
    ref = interpreter.interpret(moe, ENV, params=params)
    x = np.random.default_rng(6).standard_normal(batch + (d,))
    got, want = run.evaluate(x).outputs[0], ref.evaluate(x, on_entry=_DENSE).outputs[0]
    assert calls == [1]
    assert got.values.shape == batch + (d,)
    np.testing.assert_allclose(got.values, want.values, rtol=1e-12, atol=1e-14)
    assert got.live is None and want.live is None
    assert run.plan(batch).expert_rows


def _DENSE(*_):
    """A no-op ``on_entry``: the hooks run the plain plan (every rule, dense: no demand, no
    row chunks, no experts first), the reference here."""


class _Scaled:
    """A stand-in narrowed plan: ``g * x * (1 + at)`` for the gate's one position ``at``."""

    def __init__(self, params):
        self.params = params

    def run(self, ins):
        x, g = ins
        return [Value(g.values * x.values * (1 + self.params.at), None)]


def test_positions_are_summed_per_row_and_a_row_without_one_is_dead():
    """``run_by_position`` against the sum written out: row r gets ``sum_a g[r, a] x[r]
    (1 + a)`` over its live positions; a row with none is dead (0); rows in runs of 2."""
    rng = np.random.default_rng(0)
    n, e, d = 7, 5, 3
    x = rng.standard_normal((n, d))
    g = rng.standard_normal((n, e))
    live = rng.random((n, e)) < 0.4
    live[2] = False
    live[4] = True
    g = np.where(live, g, 0.0)
    params = plan_experts.SlicedParams({}, {})
    out = plan_experts.run_by_position(_Scaled(params), params, [Value(x, None)],
                                       Value(g, live), (n,), (d,), 2)
    want = sum(g[:, a:a + 1] * x * (1 + a) for a in range(e))
    np.testing.assert_allclose(out.values, want, rtol=1e-15)
    assert out.values[2].tolist() == [0.0] * d
    np.testing.assert_array_equal(out.live, np.repeat(live.any(1)[:, None], d, 1))
    nothing = plan_experts.run_by_position(_Scaled(params), params, [Value(x, None)],
                                           Value(0 * g, np.zeros_like(live)), (n,), (d,), 2)
    assert nothing is None


def test_narrowing_replaces_the_axis_everywhere_and_shares_the_rest():
    A = SparseAxis(901, Name("k/e"), sympy.Symbol("e"), activity=sympy.Symbol("k"))
    m = RawAxis(902, Name("m"), sympy.Integer(4))
    x = RawAxis(903, Name("x"), sympy.Integer(3))
    site = bc(Linear(Name("W"), bias=True), [weave(R, "*", m)], [weave(R, "*", A, m)],
              [rearr([0], x)])
    (new,), origin = plan_experts.narrowed((site,), A)
    assert origin[id(new)] is site
    (a1, m1) = new.output_weaves[0].target
    assert a1 == A and a1.size == 1 and m1 is m
    assert new.input_weaves[0] is site.input_weaves[0]
    assert new.operator is site.operator
    assert plan_experts.param_slices(site, A) == {"weight": (1,), "bias": (0,)}
    W = np.arange(4 * 5 * 4.0).reshape(4, 5, 4)
    params = plan_experts.SlicedParams({"w": W, "u": W}, {"w": (1,)})
    params.at = 3
    np.testing.assert_array_equal(params["w"], W[:, 3:4])
    assert params["u"] is W


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("poison", [np.nan, np.inf])
def test_unrouted_experts_poisoned_do_not_reach_the_mixture_experts_first(poison,
                                                                          monkeypatch):
    """The dead-terms test (``test_interp_dead_terms``) with the experts run first: NaN or
    inf in every unrouted expert's weights leaves the result unchanged."""
    monkeypatch.setattr(plan_module, "CHUNK_ROWS", 2)
    calls = _count_runs(monkeypatch)
    moe, params = _moe()
    d = params["Mixture of Experts/Routed Experts/W^{D}.weight"].shape[2]
    x = np.random.default_rng(9).standard_normal((9, d))
    clean = interpreter.interpret(moe, ENV, params=params)(x)[0]
    for name in BANKS:
        params[f"Mixture of Experts/Routed Experts/{name}.weight"][:, 10:] = poison
    poisoned = interpreter.interpret(moe, ENV, params=params)(x)[0]
    assert calls == [1, 1]
    assert np.isfinite(clean).all()
    assert np.array_equal(poisoned, clean)
