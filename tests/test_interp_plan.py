"""The interpreter's one evaluator, the compiled plan (``interpreter.plan``): leading batch dims
(a batch of two equals two separate runs, inputs without them broadcast), a chain against the
same numpy written by hand with its registers freed, kernels equal to their rules (and to
hand-written numpy), routed experts computed only at the routed pairs, in row chunks and
experts first, to the dense evaluation's values (the plain plan: every rule, dense)."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import sympy

from ncdc import interpreter
from ncdc.ir import AdditionOp, Linear
from ncdc.ir.env import Env
from ncdc.ir.errors import SpecError
from ncdc.ir.names import Name
from tests.conftest import ATTENTION_CORE, DATA, PYNCD, TRANSFORMER, loaded
from tests.oracles.ir_build import R, axis, bc, block, composed, rearr, weave

SPECS = {"bundled": loaded(), "transformer": loaded(TRANSFORMER),
         "attention_core": loaded(ATTENTION_CORE),
         "extra_kinds": loaded(DATA / "extra_kinds.json"),
         "tensorlogic_program": loaded(DATA / "tensorlogic_program.json"),
         **{p.stem: loaded(p) for p in sorted(PYNCD.glob("*.json"))
            if p.stem not in ("transformer", "attention_core")}}
SITES = [(name, s.path) for name, spec in SPECS.items() for s in spec.blocks()]


def _dense(run, *inputs, **kw):
    """``run`` on its plain plan (every operator by its rule, dense: no demand, no row chunks),
    which the hooks select; a no-op ``on_entry`` asks for it."""
    return run.evaluate(*inputs, on_entry=lambda *_: None, **kw)


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
    both = run.evaluate(*[np.stack([a, b]) for a, b in zip(one, two, strict=True)], tape=tape)
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
    X = np.random.default_rng(0).standard_normal((128, 128))
    want = X
    for i in range(16):
        want = want @ planned.params[f"chain/W_{i}.weight"]
    np.testing.assert_allclose(planned(X)[0], want, rtol=1e-12, atol=1e-12)
    # 16 Linear steps + the block's observer step; no step for wiring
    assert len(planned.plan()) == 17

    array = 128 * 128 * 8
    assert peak(lambda: planned(X)) < 4 * array       # never all 16 intermediates alive


@pytest.mark.parametrize("n_tok", [None, 5])
def test_routed_experts_compute_only_the_routed_pairs(n_tok):
    spec = SPECS["bundled"]
    env = spec.bind("tiny", sizes={"e": 16, "k": 4}).env
    moe = spec.block("Mixture of Experts")
    planned = interpreter.interpret(moe, env, seed=2)
    rng = np.random.default_rng(7)
    (m,) = planned.dom_shapes()[0]
    x = rng.standard_normal((m,) if n_tok is None else (n_tok, m))
    seen = {}

    def observe(blk, titles, outs, batch):
        seen[titles[-1]] = outs

    got = planned.evaluate(x, observer=observe).outputs[0]
    want = _dense(planned, x).outputs[0]
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


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


BY_HAND = {
    Linear: lambda P, a: a @ P["W.weight"] + P["W.bias"],
    AdditionOp: lambda P, a, b: a + b,
    "SoftMax": lambda P, a: _softmax(a),
    "Normalize": lambda P, a: a / np.sqrt(np.mean(a * a, -1, keepdims=True) + 1e-6)
    * P["n.gain"],
    "Einops": lambda P, a, b: np.einsum("...m,...m->...", a, b),
}
"""Each kernel's operator in numpy, by class (by name where the class is imported later)."""


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("special", [None, np.inf, -np.inf, np.nan])
def test_kernels_compute_what_their_rules_compute(special, monkeypatch):
    """Every operator with a kernel, all inputs live, leading batch dims, non-finite entries:
    the kernel path equals the rule path (kernels removed) bit for bit, the sites really run
    their kernels, and on finite inputs both are the numpy written here."""
    from ncdc.interpreter import registry
    from ncdc.interpreter.registry import KERNELS, RULES
    from ncdc.ir import Einops, Normalize, SoftMax

    for cls in (Einops, Normalize, SoftMax):
        BY_HAND.setdefault(cls, BY_HAND[cls.__name__])

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
        ref = interpreter.interpret(site, Env(), params=dict(planned.params))
        args = []
        for _ in site.input_weaves:
            a = rng.standard_normal((2, 3, 5))
            if special is not None:
                a[1, 2, :2] = special
                a[0, 1, :] = special
            args.append(a)
        with monkeypatch.context() as mp:
            mp.setattr(registry, "KERNELS", {})
            want = ref.evaluate(*args).outputs
        if special is None:
            np.testing.assert_allclose(want[0].values, BY_HAND[cls](planned.params, *args),
                                       rtol=1e-12, atol=1e-12)

        def no_rule(*_):
            raise AssertionError("the rule ran where the kernel should")

        with monkeypatch.context() as mp:
            mp.setitem(RULES, cls, no_rule)
            got = planned.evaluate(*args).outputs
        for g, w_ in zip(got, want, strict=True):
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
    (m,) = planned.dom_shapes()[0]
    x = np.random.default_rng(8).standard_normal((7, m))
    got = planned.evaluate(x).outputs[0]
    want = _dense(planned, x).outputs[0]
    np.testing.assert_allclose(got.values, want.values, rtol=1e-10, atol=1e-12)
    assert got.live is None and want.live is None
    # with an observer the part runs whole; same numbers
    watched = planned.evaluate(x, observer=lambda *a: None).outputs[0]
    np.testing.assert_allclose(watched.values, got.values, rtol=1e-12, atol=1e-14)
    # the first batch dim may be broadcast (size 1) in an input
    one = planned.evaluate(x[:1]).outputs[0]
    np.testing.assert_allclose(one.values, _dense(planned, x[:1]).outputs[0].values,
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
    dense evaluation, every row at once."""
    from ncdc.interpreter import plan as plan_module

    monkeypatch.setattr(plan_module, "CHUNK_ROWS", 3)
    spec = SPECS["bundled"]
    env = spec.bind("tiny", sizes={"e": 16, "k": 4}).env
    moe = spec.block("Mixture of Experts")
    planned = interpreter.interpret(moe, env, seed=2, quant="emulate")
    (m,) = planned.dom_shapes()[0]
    x = np.random.default_rng(9).standard_normal((7, m))
    got, want = planned.evaluate(x).outputs[0], _dense(planned, x).outputs[0]
    plan = planned.plan((7,))
    assert plan.chunk_rows == (3,) and plan.demand_sites == 0
    np.testing.assert_allclose(got.values, want.values, rtol=1e-10, atol=1e-12)
    assert got.live is None and want.live is None
