"""Generated modules sharded over gloo processes (expert parallel + FSDP2) against one process.

Two launches (2 and 4 ranks) run every case in one process group each, so the cost of starting
ranks is paid twice. Each case splits a batch over the ranks (unevenly, and with ranks that have
no rows), and its reference is the same generated source in this process, unsharded, on the
whole batch with the same weights; the gradients are those of ``sum(output * probe)``, whose sum
over the ranks is the single-process loss.
"""
from __future__ import annotations

import inspect
import multiprocessing
import sys
import time

import numpy as np
import pytest

import ncdc
from ncdc.codegen import compile_torch, load_interpreter_params
from ncdc.codegen.classinfo import Sub
from ncdc.codegen.generate import generate, instantiate
from ncdc.distributed import launch, sharded_runs
from ncdc.interpreter.inputs import random_inputs
from ncdc.rank import batch_bounds
from tests.distributed_marks import GLOO, LAUNCH_TIMEOUT
from tests.lazy import torch

pytestmark = GLOO


def _case(spec, block, *, sizes=None, quant="exact", batch=3, grads=True, static=False,
          preset="tiny"):
    """(job for the ranks, reference outputs, reference gradients or None)."""
    target = spec.block(block) if block else spec
    run = ncdc.interpret(target, preset=preset, sizes=sizes, quant=quant, stand_in=True)
    source, module = compile_torch(run.morphism, run.env, quant=quant, stand_in=True,
                                   runtime={"distributed"})
    accepts = inspect.signature(type(module).__init__).parameters
    kwargs = {k: v for k, v in (("quant", quant), ("stand_in", True),
                                ("static_shapes", static)) if k in accepts}
    if static:
        module = instantiate(sys.modules[type(module).__module__], type(module).__name__,
                             torch.float64, **kwargs)
    load_interpreter_params(module, run.params)
    env = run.env
    inputs = [np.stack(parts) for parts in zip(*(random_inputs(run.morphism, env, seed=s)
                                                 for s in range(batch)), strict=True)]
    xs = [torch.from_numpy(x) for x in inputs]
    outs = module(*xs)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    rng = np.random.default_rng(7)
    probes = [rng.standard_normal(tuple(y.shape)) for y in outs]
    ref_grads = None
    if grads:
        loss = sum((y * torch.from_numpy(p)).sum() for y, p in zip(outs, probes, strict=True))
        loss.backward()
        ref_grads = {k: None if p.grad is None else p.grad.numpy()
                     for k, p in module.named_parameters()}
    job = {"source": source, "class_name": type(module).__name__, "kwargs": kwargs,
           "dtype": "float64", "params": dict(run.params), "inputs": inputs,
           "probes": probes if grads else None, "count_exchange": True}
    param_bytes = sum(p.nbytes for p in module.parameters())
    return job, [y.detach().numpy() for y in outs], ref_grads, param_bytes


def _cases_2(spec):
    return {
        "layer0": _case(spec, "Sliding Window Layer", batch=3),
        "layer0 emulate": _case(spec, "Sliding Window Layer", quant="emulate", batch=2,
                                grads=False),
        "prefix": _case(spec, None, batch=2),
        "layer0 medium": _case(spec, "Sliding Window Layer", preset="medium", batch=2),
        "prefix medium": _case(spec, None, preset="medium", batch=2, grads=False),
    }


def _cases_4(spec):
    return {
        "layer0": _case(spec, "Sliding Window Layer", batch=5),
        # 6 experts over 4 ranks (1, 2, 1, 2)
        "moe uneven": _case(spec, "Mixture of Experts", sizes={"e": 6}, batch=4),
        # 2 rows over 4 ranks: ranks 0 and 2 have no tokens
        "moe empty ranks": _case(spec, "Mixture of Experts", sizes={"e": 6}, batch=2),
        # 3 experts over 4 ranks: rank 0 holds none; static-shape pairs
        "moe static": _case(spec, "Mixture of Experts", sizes={"e": 3}, batch=5, static=True),
    }


def _launch(cases, nproc):
    names = list(cases)
    started = time.monotonic()
    results = launch(sharded_runs, nproc, [cases[n][0] for n in names], timeout=LAUNCH_TIMEOUT)
    elapsed = time.monotonic() - started
    return {n: ([r[i] for r in results], *cases[n][1:]) for i, n in enumerate(names)}, elapsed


def _jobs_and_plan(rank, world, jobs, plan):
    """The test jobs, then one ``ncdc run --nproc`` rank of ``plan``."""
    from ncdc.distributed import _rank_of_plan

    return sharded_runs(rank, world, jobs), _rank_of_plan(rank, world, plan)


def _run_plan(spec, tmp, nproc):
    """A RankPlan as ``ncdc run --block "Mixture of Experts" --params P --inputs I --dtype
    float64 --nproc N`` makes it: a weights file and a batch of 5 inputs."""
    from ncdc.rank import RankPlan

    site = spec.site("Mixture of Experts")
    run = ncdc.interpret(site.node, env=spec.bind("tiny").env)
    params, inputs = tmp / "moe_params.npz", tmp / "moe_inputs.npz"
    np.savez(params, **{k: np.asarray(v) for k, v in dict(run.params).items()})
    x = np.random.default_rng(3).standard_normal((5, *run.dom_shapes()[0]))
    np.savez(inputs, in0=x)
    return RankPlan(site.node, run.env, str(params), dtype="float64", inputs=str(inputs),
                    nproc=nproc)


@pytest.fixture(scope="module")
def two_ranks(bundled, tmp_path_factory):
    cases = _cases_2(bundled)
    plan = _run_plan(bundled, tmp_path_factory.mktemp("run"), 2)
    names = list(cases)
    started = time.monotonic()
    results = launch(_jobs_and_plan, 2, [cases[n][0] for n in names], plan,
                     timeout=LAUNCH_TIMEOUT)
    elapsed = time.monotonic() - started
    jobs = {n: ([r[0][i] for r in results], *cases[n][1:]) for i, n in enumerate(names)}
    return jobs, elapsed, plan, results[0][1]


@pytest.fixture(scope="module")
def four_ranks(bundled):
    return _launch(_cases_4(bundled), 4)


def _check(ranks, ref_outs, ref_grads, single_bytes, exact=False):
    got = ranks[0]["outputs"]
    assert len(got) == len(ref_outs)
    for y, ref in zip(got, ref_outs, strict=True):
        assert y.shape == ref.shape
        if exact:
            np.testing.assert_array_equal(y, ref)
        else:
            np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    if ref_grads is not None:
        grads = ranks[0]["grads"]
        assert set(grads) == set(ref_grads)
        for k, ref in ref_grads.items():
            g = grads[k]
            if ref is None:  # no gradient reaches it (a top-k bias): none, or zeros
                assert g is None or not np.any(g), k
            else:
                np.testing.assert_allclose(g, ref, rtol=1e-12, atol=1e-12, err_msg=k)
    # every parameter is held once over the ranks, and no rank holds the whole model
    per_rank = [r["param_bytes"] for r in ranks]
    assert sum(per_rank) == single_bytes
    assert max(per_rank) < single_bytes


@pytest.mark.slow
@pytest.mark.parametrize("name", ["layer0", "prefix", "layer0 medium", "prefix medium"])
def test_two_ranks_match_one_process(two_ranks, name):
    results = two_ranks[0]
    _check(*results[name])


@pytest.mark.slow
def test_two_ranks_emulate_identical(two_ranks):
    results = two_ranks[0]
    _check(*results["layer0 emulate"], exact=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["layer0", "moe uneven", "moe empty ranks", "moe static"])
def test_four_ranks_match_one_process(four_ranks, name):
    results, _ = four_ranks
    _check(*results[name])


@pytest.mark.slow
def test_experts_exchanged_only_for_routed_pairs(four_ranks):
    """Each rank sends every input row of its pairs out and gets each result back: with k
    pairs per token, tokens x k x m x 8 bytes both ways, counted over the ranks."""
    results, _ = four_ranks
    ranks = results["moe uneven"][0]
    tokens, m, k = 4, 64, 2  # tiny: m = 64, k = 2
    assert sum(r["exchange_bytes"] for r in ranks) == 2 * tokens * k * m * 8


@pytest.mark.slow
def test_expert_axis_found_from_the_ir(bundled):
    """The classes that may hold a slice of an axis are found by the IR query (a Linear over a
    selected sparse axis in a pairs-mode class), not by title: only the routed experts."""
    g = generate(bundled.block("Sliding Window Layer"), ncdc.interpret(
        bundled.block("Sliding Window Layer")).env, runtime={"distributed"})
    with_facts = {(c.name, repr(c.experts)): c.experts for c in _classes(g.root)
                  if c.experts is not None}
    with_facts = list(with_facts.items())
    assert len(with_facts) == 1
    (name, _), (dims, ranks) = with_facts[0]
    assert name.startswith("RoutedExperts")
    assert dims == {"w_g": 1, "w_u": 1, "w_d": 1}
    assert ranks == (1,)
    assert "EXPERT_DIMS = (('w_g', 1), ('w_u', 1), ('w_d', 1))" in g.source


def _classes(info):
    """Every class the root builds: its submodules' and the bodies they are built around."""
    yield info
    for m in info.members:
        if isinstance(m, Sub):
            for c in (m.info, m.body):  # info None: the constructor's body argument
                if c is not None:
                    yield from _classes(c)


@pytest.mark.slow
def test_batch_and_expert_bounds():
    assert batch_bounds(2, 4) == [0, 0, 1, 1, 2]
    assert batch_bounds(5, 2) == [0, 2, 5]
    # the generated file's expert_bounds is the same rule
    ns = {}
    source = generate(ncdc.load().block("Mixture of Experts"),
                      ncdc.interpret(ncdc.load().block("Mixture of Experts")).env,
                      runtime={"distributed"}).source
    exec(compile(source, "<moe>", "exec"), ns)  # noqa: S102 - our own output
    assert ns["expert_bounds"](6, 4) == [0, 1, 3, 4, 6]
    assert ns["expert_bounds"](3, 4) == [0, 0, 1, 2, 3]


def _sleep(rank, world):
    time.sleep(600)


@pytest.mark.slow
def test_launch_is_bounded_and_leaves_no_process():
    before = set(multiprocessing.active_children())
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        launch(_sleep, 2, timeout=3)
    assert time.monotonic() - started < 30
    assert set(multiprocessing.active_children()) <= before


@pytest.mark.slow
def test_ncdc_run_nproc_matches_one_process(two_ranks):
    """``ncdc run --nproc 2``'s rank work (build on meta, shard, load each rank's part from
    the weights file, split the batch, gather on rank 0) against the same plan on one
    process."""
    import dataclasses

    from ncdc.rank import run_rank

    _, _, plan, sharded = two_ranks
    single = run_rank(dataclasses.replace(plan, nproc=1))
    assert len(sharded.outputs) == len(single.outputs) == 1
    got, ref = sharded.outputs[0].numpy(), single.outputs[0].detach().numpy()
    assert got.shape == ref.shape == (5, 64)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
