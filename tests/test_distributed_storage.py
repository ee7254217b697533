"""Generated modules holding weights in storage formats (``--weights``), sharded over 2 gloo
processes, against the same module in one process.

The one-process stored module is the reference (its dequantization was checked against
ml_dtypes in ``tests/test_codegen_storage.py``); it loads the interpreter's float64 weights and
encodes them whole. The sharded module encodes each rank's slice (``load_shard``), or takes a
rank's slice of a whole encoded weight (``ncdc run --nproc``'s loader): the codes and scales
gathered back must be the one-process ones bit for bit, the outputs equal within 1e-12 in
float64 and identical in emulate. One launch runs every case; a second (cheap) one checks that a
failing rank reaches the command line as one typed line.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

import ncdc
from ncdc.cli import main
from ncdc.codegen.generate import generate, instantiate, load_module
from ncdc.distributed import launch, sharded_runs
from ncdc.interpreter.inputs import random_inputs
from ncdc.interpreter.storage_policy import StoragePolicy
from ncdc.ir.errors import DistributedError
from tests.distributed_marks import GLOO, LAUNCH_TIMEOUT
from tests.lazy import lazy, torch

S = lazy("ncdc.codegen.prelude.storage")
"""The prelude module, imported (with torch) by the first test that uses it."""

pytestmark = GLOO

EXPERTS_MXFP4 = "*Routed Experts*=mxfp4"
MIXED = (EXPERTS_MXFP4, "*=bfloat16")


def _bits(t):
    t = t.detach()
    if t.is_floating_point() and t.element_size() < 4:
        t = t.view(torch.uint8 if t.element_size() == 1 else torch.int16)
    return t.numpy()


def _stored_bytes(module):
    """(bytes of the expert weights, bytes of the other weights held in storage formats) of
    ``module`` (a StoredWeight: its codes and scales)."""
    experts = [getattr(m, a) for m in module.modules() for a, _ in getattr(type(m),
                                                                           "EXPERT_DIMS", ())]
    stored = [m for m in module.modules() if hasattr(m, "encode_")]
    expert_bytes = sum(p.nbytes for w in experts for p in w.parameters())
    return expert_bytes, sum(p.nbytes for w in stored for p in w.parameters()) - expert_bytes


def _case(spec, block, weights, *, quant="exact", batch=3, grads=False, sizes=None,
          static=False):
    """(job for the ranks, reference outputs, reference gradients or None, reference
    parameters as bits, reference expert and dense stored bytes)."""
    run = ncdc.interpret(spec.block(block), preset="tiny", sizes=sizes, quant=quant,
                         stand_in=True)
    g = generate(run.morphism, run.env, quant=quant, weights=StoragePolicy.parse(weights),
                 runtime={"distributed"})
    kwargs = {"quant": quant} if g.root.needs_quant else {}
    if g.root.needs_stand_in:
        kwargs["stand_in"] = True
    if static:
        kwargs["static_shapes"] = True
    pymod = load_module(g.source)
    module = instantiate(pymod, g.class_name, torch.float64, **kwargs)
    pymod.load_interpreter_params(module, run.params)
    inputs = [np.stack(parts) for parts in zip(*(random_inputs(run.morphism, run.env, seed=s)
                                                 for s in range(batch)), strict=True)]
    outs = module(*[torch.from_numpy(x) for x in inputs])
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    probes = [np.random.default_rng(7).standard_normal(tuple(y.shape)) for y in outs]
    ref_grads = None
    if grads:
        sum((y * torch.from_numpy(p)).sum() for y, p in zip(outs, probes, strict=True)).backward()
        ref_grads = {k: None if p.grad is None else p.grad.numpy()
                     for k, p in module.named_parameters()}
    job = {"source": g.source, "class_name": g.class_name, "kwargs": kwargs,
           "dtype": "float64", "params": dict(run.params), "inputs": inputs,
           "probes": probes if grads else None, "count_exchange": True, "values": True}
    values = {k: _bits(p) for k, p in module.named_parameters()}
    return job, [y.detach().numpy() for y in outs], ref_grads, values, _stored_bytes(module)


def _cases(spec):
    return {
        "layer0 mxfp4": _case(spec, "Sliding Window Layer", ("mxfp4",)),
        "layer0 mxfp8 emulate": _case(spec, "Sliding Window Layer", ("mxfp8",),
                                      quant="emulate", batch=2),
        "layer0 mixed": _case(spec, "Sliding Window Layer", MIXED, batch=2),
        "moe experts mxfp4 grads": _case(spec, "Mixture of Experts", (EXPERTS_MXFP4,),
                                         batch=4, grads=True),
        # 3 experts over 2 ranks (1, 2) in bfloat16, the rest in mxfp8; static-shape pairs
        # (the weights dequantized whole)
        "moe bf16 experts uneven static": _case(
            spec, "Mixture of Experts", ("*Routed Experts*=bfloat16", "mxfp8"), batch=3,
            sizes={"e": 3}, static=True),
    }


def _plans(spec, tmp):
    """RankPlans as ``ncdc run --block "Mixture of Experts" --params FILE --inputs I --dtype
    float64 --weights ... --nproc 2`` makes them; FILE written by a one-process run's
    ``--save-params`` on synthetic weights."""
    from ncdc.rank import RankPlan, run_rank

    site = spec.site("Mixture of Experts")
    env = spec.bind("tiny").env
    run = ncdc.interpret(site.node, env=env)
    inputs = tmp / "inputs.npz"
    np.savez(inputs, in0=np.random.default_rng(3).standard_normal((5, *run.dom_shapes()[0])))
    plans = {}
    for name, weights in (("mixed", MIXED), ("mxfp8", ("mxfp8",))):
        params = tmp / f"{name}.npz"
        first = RankPlan(site.node, run.env, "synthetic", weights=weights, dtype="float64",
                         inputs=str(inputs), seed=5)
        run_rank(first, save_params=str(params))
        plans[name] = dataclasses.replace(first, source=str(params), nproc=2)
    # a DeepSeek-V3-named FP8 checkpoint through the example map (tests/test_checkpoint_map.py)
    from ncdc.distributed import _Given
    from ncdc.ir.params import param_specs
    from tests.test_checkpoint_map import MAP, deepseek_moe, write_sharded

    m, e, f = (env.size(d) for d in spec.params(site.node, spec.bind("tiny"))[2].shape)
    index = write_sharded(deepseek_moe(m, f, e)[0], tmp / "ckpt")
    plans["mapped"] = RankPlan(site.node, run.env, str(index), map=str(MAP),
                               weights=("*/Routed Experts/*=mxfp4", "mxfp8"), dtype="float64",
                               inputs=str(inputs), nproc=2,
                               model_specs=_Given(param_specs(spec.model(), env)))
    # the command of the bug report: ncdc run --params synthetic --nproc 2 --weights mxfp4
    # (--stand-in: the Engram's user data), the whole salvaged prefix
    plans["synthetic"] = RankPlan(spec.model(), env, "synthetic", weights=("mxfp4",),
                                  stand_in=True, nproc=2)
    return plans


def _everything(rank, world, jobs, plans):
    """The jobs, then one ``ncdc run --nproc`` rank of every plan, in one process group."""
    from ncdc.distributed import _rank_of_plan

    return sharded_runs(rank, world, jobs), [_rank_of_plan(rank, world, p) for p in plans]


@pytest.fixture(scope="module")
def two_ranks(bundled, tmp_path_factory):
    cases = _cases(bundled)
    plans = _plans(bundled, tmp_path_factory.mktemp("stored"))
    names = list(cases)
    started = time.monotonic()
    results = launch(_everything, 2, [cases[n][0] for n in names], list(plans.values()),
                     timeout=LAUNCH_TIMEOUT)
    elapsed = time.monotonic() - started
    jobs = {n: ([r[0][i] for r in results], *cases[n][1:]) for i, n in enumerate(names)}
    runs = {n: (plans[n], results[0][1][i]) for i, n in enumerate(plans)}
    return jobs, runs, elapsed


@pytest.mark.slow
@pytest.mark.parametrize("name", ["layer0 mxfp4", "layer0 mxfp8 emulate", "layer0 mixed",
                                  "moe experts mxfp4 grads",
                                  "moe bf16 experts uneven static"])
def test_stored_sharded_matches_one_process(two_ranks, name):
    ranks, ref_outs, _, ref_values, (expert_bytes, dense_bytes) = two_ranks[0][name]
    got = ranks[0]["outputs"]
    assert len(got) == len(ref_outs)
    for y, ref in zip(got, ref_outs, strict=True):
        assert y.shape == ref.shape
        if "emulate" in name:
            np.testing.assert_array_equal(y, ref)
        else:
            np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    # the codes and scales gathered from the ranks' slices are the one-process ones
    values = ranks[0]["values"]
    assert set(values) == set(ref_values)
    for k, ref in ref_values.items():
        assert values[k].dtype == ref.dtype, k
        np.testing.assert_array_equal(values[k], ref, err_msg=k)
    # experts: 8 over 2 ranks, half each (3: one and two), codes and scales; dense stored
    # weights: whole on every rank (left out of FSDP2)
    assert expert_bytes > 0
    share = [1, 2] if "uneven" in name else [4, 4]
    assert [r["expert_bytes"] for r in ranks] == [expert_bytes * n // sum(share) for n in share]
    assert [r["stored_bytes"] for r in ranks] == [dense_bytes] * 2


@pytest.mark.slow
def test_stored_weights_take_no_gradient_dense_ones_do(two_ranks):
    ranks, _, ref_grads, _, _ = two_ranks[0]["moe experts mxfp4 grads"]
    grads = ranks[0]["grads"]
    assert set(grads) == set(ref_grads)
    stored = [k for k in grads if k.endswith((".codes", ".scales"))]
    assert len(stored) == 6  # w_g, w_u, w_d: codes and scales (frozen storage)
    dense = 0
    for k, ref in ref_grads.items():
        if k in stored:
            assert grads[k] is None and ref is None, k
        elif ref is None:
            assert grads[k] is None or not np.any(grads[k]), k
        else:
            dense += 1
            np.testing.assert_allclose(grads[k], ref, rtol=1e-12, atol=1e-12, err_msg=k)
    assert dense >= 3  # the shared expert and the gate, in float64 under FSDP2


@pytest.mark.slow
def test_exchange_bytes_unchanged_by_storage(two_ranks):
    """The exchange sends activations, not weights: tokens x k x m x 8 bytes each way."""
    ranks = two_ranks[0]["moe experts mxfp4 grads"][0]
    tokens, m, k = 4, 64, 2  # tiny: m = 64, k = 2
    assert sum(r["exchange_bytes"] for r in ranks) == 2 * tokens * k * m * 8


@pytest.mark.slow
def test_ncdc_run_nproc_synthetic_stored_weights(two_ranks):
    """Synthetic weights are drawn per shard (values differ from one process): the run
    completes with finite outputs of the one-process shapes."""
    from ncdc.rank import run_rank

    plan, sharded = two_ranks[1]["synthetic"]
    single = run_rank(dataclasses.replace(plan, nproc=1))
    assert [tuple(y.shape) for y in sharded.outputs] == \
        [tuple(y.shape) for y in single.outputs]
    for y in sharded.outputs:
        assert torch.isfinite(y.to(torch.float64)).all()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mixed", "mxfp8", "mapped"])
def test_ncdc_run_nproc_stored_matches_one_process(two_ranks, name):
    """``ncdc run --nproc 2 --weights ... --params FILE`` (each rank cuts its part of every
    whole encoded weight) gives the one-process outputs on the same file (mapped: a sharded
    FP8 checkpoint through a map, ``--map``)."""
    from ncdc.rank import run_rank

    plan, sharded = two_ranks[1][name]
    single = run_rank(dataclasses.replace(plan, nproc=1))
    got, ref = sharded.outputs[0].numpy(), single.outputs[0].detach().numpy()
    assert got.shape == ref.shape == (5, 64)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    assert np.abs(ref).max() > 0.01


def test_narrow_keeps_codes_scales_and_values():
    """An expert slice of a stored weight: the same codes, scales and values as the whole
    one's slice (the scale groups lie along the contracted input dims, the expert axis indexes
    runs); a cut along the dims the groups lie in is refused."""
    torch.manual_seed(0)
    values = torch.randn(40, 6, 3, dtype=torch.float64)  # [in, e, out]: runs of 40 (2 groups)
    for fmt in ("mxfp4", "mxfp8", "bfloat16"):
        w = S.StoredWeight(values.shape, fmt, lead=1).to(torch.float64)
        w.encode_(values)
        part = w.narrow(1, 2, 3)
        assert tuple(part.shape) == (40, 3, 3)
        np.testing.assert_array_equal(part.dequantize().numpy(),
                                      w.dequantize()[:, 2:5].numpy())
        alone = S.StoredWeight((40, 3, 3), fmt, lead=1).to(torch.float64)
        alone.encode_(values[:, 2:5])
        for mine, ref in zip(part.parameters(), alone.parameters(), strict=True):
            np.testing.assert_array_equal(_bits(mine), _bits(ref))
        if fmt != "bfloat16":
            with pytest.raises(ValueError, match="scale groups"):
                w.narrow(0, 0, 8)
    on_meta = S.StoredWeight((40, 6, 3), "mxfp4", lead=1).to("meta").narrow(1, 0, 0)
    assert on_meta.codes.shape == (0, 20) and on_meta.scales.shape == (0, 2)


def test_a_rank_error_in_one_line():
    """What the launcher reports of a rank's error (no launch: the CLI test below runs one)."""
    from ncdc.checkpoint.errors import CheckpointError
    from ncdc.distributed import _one_line

    assert _one_line(RuntimeError("boom on one rank\nsecond line")) == \
        "RuntimeError: boom on one rank"
    assert _one_line(KeyError()) == "KeyError"
    assert _one_line(CheckpointError("3 learned array(s) not in the weights")) == \
        "3 learned array(s) not in the weights"


@pytest.mark.slow
def test_cli_rank_failure_exit_1_one_line(tmp_path, capsys, bundled):
    """A weights file missing a key under --nproc 2: exit status 1 and one error line naming
    the rank and its own message, no traceback; --debug adds the rank's traceback."""
    run = ncdc.interpret(bundled.block("Mixture of Experts"))
    params = dict(run.params)
    dropped = min(params)
    del params[dropped]
    path = tmp_path / "lacking.npz"
    np.savez(path, **params)
    status = main(["run", "--block", "Mixture of Experts", "--params", str(path),
                   "--weights", EXPERTS_MXFP4, "--nproc", "2"])
    err = capsys.readouterr().err
    assert status == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("error: rank ") and " of 2 failed: " in lines[0]
    assert "not in the weights" in lines[0] and dropped in lines[0]


def test_save_params_needs_one_process(capsys):
    assert main(["run", "--block", "Mixture of Experts", "--params", "synthetic", "--nproc", "2",
                 "--save-params", "never.npz"]) == 2
    assert "--save-params writes the weights of a one-process run" in capsys.readouterr().err


def test_cli_debug_prints_the_rank_traceback(monkeypatch, capsys):
    import ncdc.distributed as D

    def failing(plan, timeout=0):
        raise DistributedError("rank 1 of 2 failed: X", rank=1,
                               rank_traceback="Traceback (most recent call last):\n  here\n")
    monkeypatch.setattr(D, "run_sharded", failing)
    args = ["run", "--block", "Mixture of Experts", "--params", "synthetic", "--nproc", "2"]
    assert main(args) == 1
    assert "Traceback" not in capsys.readouterr().err
    assert main([*args, "--debug"]) == 1
    err = capsys.readouterr().err
    assert "rank 1's traceback:\nTraceback (most recent call last):\n  here" in err
    assert err.rstrip().endswith("error: rank 1 of 2 failed: X")
