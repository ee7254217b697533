"""The softmax with a learned sink (the bundled Attention Core) is shifted by the joint maximum
of its live row and its sink (ir/rewrites.stable_composition) in the interpreter and the
generated code. Checked against the block as its description reads it, written here in numpy
with the log-sum-exp shift done by hand: ordinary inputs (also against the literal form),
scores and sinks of +-1e4 in every dtype, dead window slots, rows with every slot dead."""
from __future__ import annotations

import numpy as np
import pytest

from ncdc import interpreter
from ncdc.codegen import generate, instantiate, load_module
from ncdc.ir import dataflow
from ncdc.ir.pipeline import normalize
from ncdc.ir.rewrites import SinkShift, stable_composition
from ncdc.verify.tolerance import UNIT_ROUNDOFF, round_to
from tests.lazy import torch

DTYPES = ("float64", "float32", "bfloat16", "float16")


@pytest.fixture(scope="module")
def env(bundled):
    return bundled.bind("tiny").env


@pytest.fixture(scope="module")
def core(bundled):
    return bundled.block("Attention Core")


@pytest.fixture(scope="module")
def generated(core, env):
    g = generate(core, env)
    return g, load_module(g.source)


def _reference(sink, q, k, live):
    """Attention Core by its description, in float64: scores ``q . k / sqrt(c)`` over the live
    window slots, ``p = e^{score - M}``, ``M = max(live scores, sink)``, output ``sum_w p k /
    (sum_w p + e^{sink - M})``; rows with no live slot are dead (returned as 0)."""
    c = q.shape[-1]
    scores = np.einsum("xc,xwc->xw", q, np.where(live, k, 0)) / np.sqrt(c)
    slot_live = live.any(-1)
    m = np.maximum(np.where(slot_live, scores, -np.inf).max(-1), sink)
    p = np.exp(np.where(slot_live, scores - m[:, None], -np.inf))
    z = p.sum(-1) + np.exp(sink - m)
    out = np.einsum("xw,xwc->xc", p, np.where(live, k, 0)) / z[:, None]
    row_live = slot_live.any(-1)
    return np.where(row_live[:, None], out, 0), row_live


def _inputs(env, core, rng, extreme: bool, sink: float = 0.0, big: float = 1e4):
    """Query ``sqrt(c)`` times a one-hot vector and keys whose first entries are the scores
    (exact in every dtype): scores of +-``big`` plus small integer offsets when ``extreme``."""
    _, q_arr, k_arr = core.dom
    x, c = env.sizes(q_arr.shape)
    w = env.sizes(k_arr.shape)[1]
    if not extreme:
        q = rng.standard_normal((x, c))
        k = rng.standard_normal((x, w, c))
        return np.array(sink), q, k
    q = np.zeros((x, c))
    q[:, 0] = np.sqrt(c)
    k = rng.standard_normal((x, w, c))
    k[:, :, 0] = rng.choice([-big, big], size=(x, 1)) + rng.integers(-8, 8, size=(x, w))
    return np.array(sink), q, k


def _window_live(env, core, rng):
    """Some dead slots in every row, and two rows with none live."""
    _, _, k_arr = core.dom
    x, w, c = env.sizes(k_arr.shape)
    slots = rng.random((x, w)) < 0.6
    slots[:, 0] = True
    slots[1] = False
    slots[5] = False
    return np.broadcast_to(slots[:, :, None], (x, w, c)).copy()


def _interpret(core, env, xs, live, plain=False):
    run = interpreter.interpret(core, env)
    fed = list(xs[:2]) + [(xs[2], live) if live is not None else xs[2]]
    hooks = {"on_entry": lambda *_: None} if plain else {}
    out = run.evaluate(*fed, **hooks).outputs[0]
    return np.asarray(out.values), None if out.live is None else np.asarray(out.live, bool)


def _generated(generated, xs, live, dtype):
    g, mod = generated
    module = instantiate(mod, g.class_name, torch.float32).to(getattr(torch, dtype))
    args = [torch.from_numpy(round_to(x, dtype)).to(getattr(torch, dtype)) for x in xs]
    kw = {} if live is None else {"window_latent_live": torch.from_numpy(live)}
    with torch.no_grad():
        out = module(*args, **kw)
    values, out_live = out if isinstance(out, tuple) else (out, None)
    return values.double().numpy(), None if out_live is None else out_live.numpy()


def _literal_pipeline(monkeypatch):
    """The interpreter normalizes without the sink pass from here on (the literal form)."""
    from ncdc.interpreter import api

    monkeypatch.setattr(api, "normalize", lambda m, **kw: normalize(m, skip=("sink_shift",),
                                                                    **kw))


def test_the_shift_is_found_on_the_data_flow_graph(core):
    """One SinkShift reading the scaled scores and the sink; both exponentials read its
    outputs; the spec's own composition is untouched; the shifted form is left as it is."""
    body = core.body
    stable = stable_composition(body)
    assert stable is not body
    assert stable_composition(stable) is stable
    g = dataflow.flatten(stable)
    (i,) = [i for i, st in enumerate(g.steps) if isinstance(getattr(st, "operator", None),
                                                               SinkShift)]
    assert g.reads[i][1] == 0  # the sink logit, the block's first input
    readers = sorted(r for w in g.writes[i] for r in g.readers(w))
    assert all("exp" in str(g.steps[r].operator.formula) for r in readers)
    assert not any(isinstance(getattr(st, "operator", None), SinkShift)
                   for st in dataflow.flatten(body).steps)


def test_no_shift_where_the_exponential_feeds_anything_else(bundled):
    """Compositions without the pattern come back as they are (every block of the bundled
    spec but the Attention Core)."""
    shifted = set()
    for site in bundled.blocks():
        body = site.node.body
        if stable_composition(body) is not body:
            shifted.add(site.titles[-1])
    assert shifted == {"Attention Core"}


@pytest.mark.parametrize("plain", [False, True], ids=["plan", "plain plan"])
def test_ordinary_inputs_agree_with_the_literal_form(core, env, monkeypatch, plain):
    rng = np.random.default_rng(0)
    xs = _inputs(env, core, rng, extreme=False, sink=0.7)
    live = _window_live(env, core, rng)
    got, got_live = _interpret(core, env, xs, live, plain)
    _literal_pipeline(monkeypatch)
    literal, literal_live = _interpret(core, env, xs, live, plain)
    assert np.array_equal(got_live, literal_live)
    assert np.max(np.abs(got - literal)) <= 1e-14 * np.max(np.abs(literal))
    want, want_live = _reference(float(xs[0]), xs[1], xs[2], live)
    assert np.array_equal(got_live.all(-1), want_live)
    assert np.max(np.abs(got - want)) <= 1e-14 * np.max(np.abs(want))


def test_the_literal_form_overflows_where_the_shifted_one_does_not(core, env, monkeypatch):
    """What the rewrite is for: scores of 1e4 make e^x infinite in float64 too."""
    xs = _inputs(env, core, np.random.default_rng(1), extreme=True, sink=-1e4)
    got, _ = _interpret(core, env, xs, None)
    assert np.isfinite(got).all()
    _literal_pipeline(monkeypatch)
    literal, _ = _interpret(core, env, xs, None)
    assert not np.isfinite(literal).all()


CASES = [("scores", -1e4), ("sink", 1e4), ("mixed", 0.0), ("both", 1e4 + 3)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("case", "sink"), CASES, ids=[c for c, _ in CASES])
def test_extreme_inputs_in_every_dtype(core, env, generated, dtype, case, sink):
    """Scores of +-1e4 (each row near one of them), sinks of +-1e4, dead slots and two rows
    with no live slot: the generated module in ``dtype`` (and the interpreter in float64) are
    finite and within a few unit roundoffs of the reference on the same rounded inputs; dead
    rows are dead. In float16 the scores are +-5e3: with a score of 1e4 the unscaled product
    ``q . k`` (8e4 at c = 64) and the unnormalised numerator ``sum_w e^{x-M} k`` (up to w
    times a key) exceed float16's range (65504) whatever the softmax does."""
    rng = np.random.default_rng(len(case))
    xs = _inputs(env, core, rng, extreme=True, sink=sink,
                 big=5e3 if dtype == "float16" else 1e4)
    live = _window_live(env, core, rng)
    xs = tuple(round_to(x, dtype) for x in xs)
    want, want_live = _reference(float(xs[0]), xs[1], xs[2], live)
    got, got_live = _generated(generated, xs, live, dtype)
    assert np.isfinite(got).all()
    assert np.array_equal(got_live.all(-1), want_live)
    u = UNIT_ROUNDOFF[dtype]
    w = env.sizes(core.dom[2].shape)[1]
    # the first channel carries the +-1e4 keys, the others O(1) values: each to its own scale
    for cols in (slice(0, 1), slice(1, None)):
        scale = max(np.max(np.abs(want[:, cols])), np.finfo(np.float64).tiny)
        assert np.max(np.abs(got[:, cols] - want[:, cols])) <= 4 * w * u * scale, cols
    if dtype == "float64":
        mine, mine_live = _interpret(core, env, xs, live)
        assert np.array_equal(mine_live.all(-1), want_live)
        assert np.max(np.abs(mine - want)) <= 1e-14 * np.max(np.abs(want))


def test_dead_slots_never_enter_the_maximum(core, env, generated):
    """Live scores near -1e4 and a sink of -1e4: a dead slot (score 0 after zeroing) in the
    maximum would underflow every term (0/0). Both sides stay finite and agree."""
    rng = np.random.default_rng(3)
    xs = list(_inputs(env, core, rng, extreme=True, sink=-1e4))
    xs[2][:, :, 0] = -1e4 + rng.integers(-8, 8, size=xs[2].shape[:2])
    live = _window_live(env, core, rng)
    want, want_live = _reference(-1e4, xs[1], xs[2], live)
    assert np.max(np.abs(want)) > 1  # live rows are ordinary averages of keys
    got, got_live = _generated(generated, xs, live, "float32")
    assert np.isfinite(got).all() and np.array_equal(got_live.all(-1), want_live)
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))
    mine, _ = _interpret(core, env, xs, live)
    assert np.max(np.abs(mine - want)) <= 1e-14 * np.max(np.abs(want))


def test_dead_scores_hold_minus_infinity_for_the_exponential_alone(core, env):
    """The shift leaves -inf at the dead slots: one ``where`` puts it there, the exponential
    reads it with no re-zeroing of its own (e^-inf = 0), and nothing else reads the shifted
    scores; emulate mode, which rounds them, zeroes them first."""
    source = generate(core, env).source
    body = source[source.index("def forward"):]
    assert body.count("-math.inf)") == 1 and "torch.where" not in body.split("torch.exp(")[1]
    assert "= torch.exp(shifted)" in body
    emulated = generate(core, env, quant="emulate").source
    assert "torch.where(contraction_live, shifted, 0)" in emulated


def test_emulate_stays_bit_identical(core, env):
    from ncdc.verify.check import check_morphism

    r = check_morphism(core, env, quant="emulate")
    assert r.ok, r.problem
    assert "SinkShift" not in generate(core, env).source  # an operator, not a name


def _bare_exps(expr) -> list:
    import sympy

    return [a for a in sympy.preorder_traversal(expr)
            if isinstance(a, sympy.exp) or (a.is_Pow and a.base == sympy.E)]


def _unsafe_exponentials(spec) -> list[str]:
    """Titles of every exponential of ``spec`` left literal: an ``Arithmetic`` whose safe form
    (:func:`ir.rewrites.stable`) still holds a bare ``e^a`` and that neither a softmax pair nor
    a sink shift covers, or an older-generation ``exp``. (Rotary tables are ``e^{i theta}``,
    of modulus 1; ``SoftMax`` subtracts the row maximum.)"""
    import itertools

    from ncdc.ir.morphisms import Broadcasted, Composed
    from ncdc.ir.operators import Arithmetic, Elementwise
    from ncdc.ir.rewrites import _core, softmax_pair, stable
    from ncdc.spec.checks_sites import all_sites

    covered = set()  # paths of the exponential boxes a rewrite covers
    for site in all_sites(spec.data):
        m = site.node
        if not isinstance(m, Composed):
            continue
        covered |= {a.path for a, b in itertools.pairwise(m.content) if softmax_pair(a, b)}
        g = dataflow.flatten(stable_composition(m))
        for i, step in enumerate(g.steps):
            p = g.producer(g.reads[i][0]) if g.reads[i] else None
            if p is not None and isinstance(getattr(g.steps[p], "operator", None), SinkShift):
                covered.add(_core(step).path)
    bad = []
    for site in all_sites(spec.data):
        m = site.node
        if not isinstance(m, Broadcasted):
            continue
        op = m.operator
        if isinstance(op, Arithmetic) and _bare_exps(stable(op.formula)) \
                and m.path not in covered:
            bad.append(" / ".join(site.titles))
        if isinstance(op, Elementwise) and op.function == "exp":
            bad.append(" / ".join(site.titles))
    return bad


def test_every_exponential_is_in_a_safe_form(bundled):
    """Bundled: First Sinkhorn Round (softmax pair), Attention Core (sink shift), Expert Gate
    (softplus as LogSumExp); pyncd examples: SoftMax operators and a sigmoid only."""
    import ncdc
    from tests.conftest import PYNCD

    assert _unsafe_exponentials(bundled) == []
    for path in sorted(PYNCD.glob("*.json")):
        assert _unsafe_exponentials(ncdc.load(path)) == [], path.name
