"""Compiled plans (``interpreter.plan``) agree with the recursive evaluator (``plan=False``) on
every block of every spec in the tests, in both quantisation modes: the same values (bit for
bit: the same rules run in the same order), liveness, final tape, observer calls and parameter
reads. Leading batch dims: a batch of two equals two separate runs. Plans clear registers after
their last use (peak memory as the recursive evaluator's)."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import sympy
from conftest import ATTENTION_CORE, DATA, PYNCD, TRANSFORMER, loaded
from ncdc.ir import AdditionOp, Linear
from ncdc.ir.env import Env
from ncdc.ir.errors import SpecError
from ncdc.ir.names import Name

from ncdc import interpreter
from tests.oracles.ir_build import R, axis, bc, block, composed, rearr, weave

SPECS = {"bundled": loaded(), "transformer": loaded(TRANSFORMER),
         "attention_core": loaded(ATTENTION_CORE),
         "extra_kinds": loaded(DATA / "extra_kinds.json"),
         "tensorlogic_program": loaded(DATA / "tensorlogic_program.json"),
         **{p.stem: loaded(p) for p in sorted(PYNCD.glob("*.json"))
            if p.stem not in ("transformer", "attention_core")}}
PYNCD_SPECS = {p.stem for p in PYNCD.glob("*.json")}
ROOT = "<root>"
"""The whole spec (its complete prefix when truncated) as one more site."""
SITES = [(name, s.path) for name, spec in SPECS.items() for s in spec.blocks()]
READ_SITES = [(name, path, "faithful") for name, path in SITES + [(n, ROOT) for n in SPECS]] + [
    (name, path, "pyncd") for name, path in SITES + [(n, ROOT) for n in SPECS]
    if name in PYNCD_SPECS]
"""(spec, site, reading): every block and root of every spec; the pyncd exports under both
readings (:mod:`ir.readings`)."""


def _site(spec, path):
    return interpreter.prefix(spec.data) if path == ROOT else spec.block(path)


def _outcome(run, inputs, tape):
    """(outputs, tape, observed blocks) of one evaluation, or the error it raised."""
    seen = []

    def observe(blk, titles, outs, batch):
        seen.append((titles, batch, [(np.array(v.values), None if v.live is None
                                      else np.array(v.live)) for v in outs]))

    try:
        res = run.evaluate(*inputs, tape=tape, observer=observe)
    except SpecError as exc:
        return ("error", type(exc), exc.message, exc.json_path, exc.titles)
    return res, seen


def _same_value(a, b):
    assert a.values.dtype == b.values.dtype
    np.testing.assert_array_equal(a.values, b.values)
    assert (a.live is None) == (b.live is None)
    if a.live is not None:
        np.testing.assert_array_equal(a.live, b.live)


def _close_value(a, b):
    assert a.values.dtype == b.values.dtype
    np.testing.assert_allclose(a.values, b.values, rtol=1e-10, atol=1e-12)
    assert (a.live is None) == (b.live is None)
    if a.live is not None:
        np.testing.assert_array_equal(a.live, b.live)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("quant", ["exact", "emulate"])
@pytest.mark.parametrize(("spec_name", "path", "reading"), READ_SITES,
                         ids=[f"{n}:{p}:{r}" for n, p, r in READ_SITES])
def test_plan_agrees_with_the_recursive_evaluator(spec_name, path, reading, quant):
    spec = SPECS[spec_name]
    env = spec.bind("tiny").env
    m = _site(spec, path)
    inputs = interpreter.random_inputs(m, env, 4)
    tape = interpreter.random_tape(m, env, 4)
    ref = interpreter.interpret(m, env, quant=quant, stand_in=True, seed=3, plan=False,
                                reading=reading)
    planned = interpreter.interpret(m, env, quant=quant, stand_in=True, seed=3,
                                    reading=reading)
    want, got = _outcome(ref, inputs, tape), _outcome(planned, inputs, tape)
    if want[0] == "error":
        assert got == want
        return
    (res_w, seen_w), (res_g, seen_g) = want, got
    # demand on a sparse axis computes the read positions by other (BLAS) matmuls and leaves
    # the unread ones dead inside the gated part: values agree to rounding there
    same = _same_value if not planned.plan().demand_sites else _close_value
    assert len(res_g.outputs) == len(res_w.outputs)
    for a, b in zip(res_g.outputs, res_w.outputs):
        same(a, b)
    assert res_g.tape.keys() == res_w.tape.keys()
    for k in res_w.tape:
        same(res_g.tape[k], res_w.tape[k])
    assert [(t, bt) for t, bt, _ in seen_g] == [(t, bt) for t, bt, _ in seen_w]
    if not planned.plan().demand_sites:
        for (_, _, og), (_, _, ow) in zip(seen_g, seen_w):
            for (vg, lg), (vw, lw) in zip(og, ow):
                np.testing.assert_array_equal(vg, vw)
                assert (lg is None) == (lw is None)
    # a second call runs the same plan (compiled once) to the same result, the tree walk's
    again = planned.evaluate(*inputs, tape=tape)
    for a, b, w in zip(again.outputs, res_g.outputs, res_w.outputs):
        _same_value(a, b)
        same(a, w)
    assert len(planned._plans) == 1


BATCH_SITES = [(n, p) for n, p in SITES if n != "extra_kinds"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(("spec_name", "path"), BATCH_SITES,
                         ids=[f"{n}:{p}" for n, p in BATCH_SITES])
def test_a_batch_of_two_equals_two_runs(spec_name, path):
    spec = SPECS[spec_name]
    env = spec.bind("tiny").env
    m = spec.block(path)
    if not m.dom:
        pytest.skip("no input to batch")
    run = interpreter.interpret(m, env, stand_in=True, seed=3)
    tape = interpreter.random_tape(m, env, 4)
    one, two = interpreter.random_inputs(m, env, 4), interpreter.random_inputs(m, env, 5)
    try:
        sep = [run.evaluate(*xs, tape=tape) for xs in (one, two)]
    except SpecError:
        pytest.skip("the block does not evaluate on random inputs")
    both = run.evaluate(*[np.stack([a, b]) for a, b in zip(one, two)], tape=tape)
    for j, out in enumerate(both.outputs):
        assert out.values.shape == (2,) + sep[0].outputs[j].values.shape
        for i in range(2):
            want = sep[i].outputs[j]
            np.testing.assert_allclose(out.values[i], want.values, rtol=1e-9, atol=1e-12)
            live = np.ones(want.values.shape, bool) if want.live is None else want.live
            got = np.ones(want.values.shape, bool) if out.live is None else out.live[i]
            np.testing.assert_array_equal(got, live)


def test_inputs_without_the_batch_broadcast_over_it():
    x, m = axis("x", 3), axis("m", 4)
    add = bc(AdditionOp(Name("+")),
             [weave(R, "*", m), weave(R, "*", m)], [weave(R, "*", m)],
             [rearr([0], x), rearr([0], x)])
    run = interpreter.interpret(add, Env())
    a = np.arange(2 * 5 * 12, dtype=float).reshape(2, 5, 3, 4)
    b = np.ones((5, 3, 4))
    (y,) = run(a, b)
    np.testing.assert_array_equal(y, a + b)
    with pytest.raises(SpecError, match="do not broadcast"):
        run(a, np.ones((3, 3, 4)))
    with pytest.raises(SpecError, match=r"has shape \(2, 5, 3, 5\)"):
        run(np.ones((2, 5, 3, 5)), b)


def peak(fn) -> int:
    """tracemalloc peak (bytes) of one call of ``fn``."""
    tracemalloc.start()
    fn()
    _, p = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return p


def _linear_chain(n, size):
    x, m = axis("x", size), axis("m", size)
    items = [bc(Linear(Name(f"W_{i}")), [weave(R, "*", m)], [weave(R, "*", m)],
                [rearr([0], x)]) for i in range(n)]
    return block(composed(*items), "chain")


def test_a_chain_plans_one_step_per_operator_and_frees_its_registers():
    chain = _linear_chain(16, 128)
    env = Env()
    planned = interpreter.interpret(chain, env)
    ref = interpreter.interpret(chain, env, params=dict(planned.params), plan=False)
    X = np.random.default_rng(0).standard_normal((128, 128))
    np.testing.assert_array_equal(planned(X)[0], ref(X)[0])
    # 16 Linear steps + the block's observer step; no step for wiring
    assert len(planned.plan()) == 17

    array = 128 * 128 * 8
    p_plan, p_ref = peak(lambda: planned(X)), peak(lambda: ref(X))
    assert p_plan < 4 * array, (p_plan, p_ref)       # never all 16 intermediates alive
    assert p_plan <= p_ref + array


@pytest.mark.parametrize("n_tok", [None, 5])
def test_routed_experts_compute_only_the_routed_pairs(n_tok):
    spec = SPECS["bundled"]
    env = spec.bind("tiny", sizes={"e": 16, "k": 4}).env
    moe = spec.block("Mixture of Experts")
    planned = interpreter.interpret(moe, env, seed=2)
    ref = interpreter.interpret(moe, env, params=dict(planned.params), plan=False)
    rng = np.random.default_rng(7)
    (m,) = planned.dom_shapes()[0]
    x = rng.standard_normal((m,) if n_tok is None else (n_tok, m))
    seen = {}

    def observe(blk, titles, outs, batch):
        seen[titles[-1]] = outs

    got = planned.evaluate(x, observer=observe).outputs[0]
    want = ref.evaluate(x).outputs[0]
    np.testing.assert_allclose(got.values, want.values, rtol=1e-10, atol=1e-12)
    assert planned.plan(() if n_tok is None else (n_tok,)).demand_sites == 2   # W^G, W^U
    (gate,) = seen["Expert Gate"]
    (routed,) = seen["Routed Experts"]
    chosen = gate.live                                  # [*tokens, e]: k live per token
    assert chosen is not None and np.all(chosen.sum(-1) == 4)
    # the experts' output is live (computed) exactly at the routed (token, expert) pairs
    live = np.broadcast_to(routed.live, routed.values.shape)
    np.testing.assert_array_equal(live, np.broadcast_to(chosen[..., None], live.shape))
    assert not np.any(routed.values[~live])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("special", [None, np.inf, -np.inf, np.nan])
def test_kernels_compute_what_their_rules_compute(special, monkeypatch):
    """Every operator with a kernel, all inputs live, leading batch dims, non-finite entries:
    the kernel path (plans) equals the rule path (plan=False) bit for bit, and the sites
    really run their kernels."""
    from ncdc.interpreter.registry import KERNELS, RULES
    from ncdc.ir import Einops, Normalize, SoftMax

    x, m = axis("x", 3), axis("m", 5)
    over = rearr([0], x)
    sites = {
        Linear: bc(Linear(Name("W"), bias=True), [weave(R, "*", m)], [weave(R, "*", m)], [over]),
        AdditionOp: bc(AdditionOp(Name("+")), [weave(R, "*", m)] * 2, [weave(R, "*", m)],
                       [over, over]),
        SoftMax: bc(SoftMax(Name("s")), [weave(R, "*", m)], [weave(R, "*", m)], [over]),
        Normalize: bc(Normalize(Name("n"), gain=True, epsilon=sympy.Float(1e-6)),
                      [weave(R, "*", m)], [weave(R, "*", m)], [over]),
        Einops: bc(Einops(Name("e"), signature=((0,), (0,))), [weave(R, "*", m)] * 2,
                   [weave(R, "*")], [over, over]),
    }
    assert set(KERNELS) == set(sites)
    rng = np.random.default_rng(0)
    for cls, site in sites.items():
        planned = interpreter.interpret(site, Env(), seed=1)
        ref = interpreter.interpret(site, Env(), params=dict(planned.params), plan=False)
        args = []
        for _ in site.input_weaves:
            a = rng.standard_normal((2, 3, 5))
            if special is not None:
                a[1, 2, :2] = special
                a[0, 1, :] = special
            args.append(a)
        want = ref.evaluate(*args).outputs

        def no_rule(*_):
            raise AssertionError("the rule ran where the kernel should")

        with monkeypatch.context() as mp:
            mp.setitem(RULES, cls, no_rule)
            got = planned.evaluate(*args).outputs
        for g, w_ in zip(got, want):
            np.testing.assert_array_equal(g.values, w_.values)
            assert g.live is None and w_.live is None


@pytest.mark.parametrize("chunk", [3, 7, 64])
def test_gated_experts_run_in_row_chunks_to_the_same_result(chunk, monkeypatch):
    from ncdc.interpreter import plan as plan_module

    monkeypatch.setattr(plan_module, "CHUNK_ROWS", chunk)
    spec = SPECS["bundled"]
    env = spec.bind("tiny", sizes={"e": 16, "k": 4}).env
    moe = spec.block("Mixture of Experts")
    planned = interpreter.interpret(moe, env, seed=2)
    ref = interpreter.interpret(moe, env, params=dict(planned.params), plan=False)
    (m,) = planned.dom_shapes()[0]
    x = np.random.default_rng(8).standard_normal((7, m))
    got = planned.evaluate(x).outputs[0]
    want = ref.evaluate(x).outputs[0]
    np.testing.assert_allclose(got.values, want.values, rtol=1e-10, atol=1e-12)
    assert got.live is None and want.live is None
    # with an observer the part runs whole; same numbers
    watched = planned.evaluate(x, observer=lambda *a: None).outputs[0]
    np.testing.assert_allclose(watched.values, got.values, rtol=1e-12, atol=1e-14)
    # the first batch dim may be broadcast (size 1) in an input
    one = planned.evaluate(x[:1]).outputs[0]
    np.testing.assert_allclose(one.values, ref.evaluate(x[:1]).outputs[0].values,
                               rtol=1e-10, atol=1e-12)


def test_gated_chunks_are_sized_from_a_byte_budget(monkeypatch):
    """Rows per chunk = budget / (8 bytes x the widest per-row array, the experts' output
    ``[e, d]`` of the fused ``W^D`` bank): computed here from the weight's shape; the part's
    tracemalloc peak then grows with the token count only by the ``[x, d]`` rows in and out,
    not by ``[x, e, d]`` (half of one such array is the bound checked)."""
    from ncdc.interpreter import plan as plan_module

    spec = SPECS["bundled"]
    env = spec.bind("tiny", sizes={"e": 16, "k": 4}).env
    moe = spec.block("Mixture of Experts")
    planned = interpreter.interpret(moe, env, seed=2)
    (_f, e, d) = next(v.shape for k, v in planned.params.items() if "W^{D}" in k)
    row = 8 * e * d
    monkeypatch.setattr(plan_module, "CHUNK_BYTES", 4 * row)
    run = interpreter.interpret(moe, env, params=dict(planned.params))
    assert run.plan((64,)).chunk_rows == (4,)
    monkeypatch.setattr(plan_module, "CHUNK_BYTES", 3 * row - 1)
    assert interpreter.interpret(moe, env, params=dict(planned.params)).plan((64,)).chunk_rows \
        == (2,)
    rng = np.random.default_rng(3)
    peaks = {}
    for n in (64, 512):
        x = rng.standard_normal((n, d))
        run(x)

        def once(x=x):
            return run(x)

        peaks[n] = peak(once)
    grown = peaks[512] - peaks[64]
    assert grown < 448 * e * d * 8 / 2, (peaks, e, d)   # unbounded, it grows 9.5 MB here


def test_emulate_runs_the_experts_in_row_chunks_without_demand(monkeypatch):
    """In emulate mode the bank Linears keep their rules (rounding), so nothing is demanded,
    but the gated part still runs in row chunks over a leading batch dim: same values as the
    tree walk, which evaluates every row at once."""
    from ncdc.interpreter import plan as plan_module

    monkeypatch.setattr(plan_module, "CHUNK_ROWS", 3)
    spec = SPECS["bundled"]
    env = spec.bind("tiny", sizes={"e": 16, "k": 4}).env
    moe = spec.block("Mixture of Experts")
    planned = interpreter.interpret(moe, env, seed=2, quant="emulate")
    ref = interpreter.interpret(moe, env, params=dict(planned.params), quant="emulate",
                                plan=False)
    (m,) = planned.dom_shapes()[0]
    x = np.random.default_rng(9).standard_normal((7, m))
    got, want = planned.evaluate(x).outputs[0], ref.evaluate(x).outputs[0]
    plan = planned.plan((7,))
    assert plan.chunk_rows == (3,) and plan.demand_sites == 0
    np.testing.assert_allclose(got.values, want.values, rtol=1e-10, atol=1e-12)
    assert got.live is None and want.live is None
