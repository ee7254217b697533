"""One process's run of a generated module: the unit ``ncdc run`` runs, once or on each rank
of a sharded run (:mod:`ncdc.distributed`).

A :class:`RankPlan` names a morphism under a binding, its weights and inputs; :func:`run_rank`
builds the module on the meta device, fills it from the weights (a weights file, a mapped
checkpoint or seeded synthetic values), runs one forward pass and returns a :class:`RankResult`
with the outputs, the time of each stage and the peak resident memory. On a rank of a sharded run
the module is sharded before it is given memory (:func:`shard_built`) and the inputs' batch is
split over the ranks (:func:`split_batch`).

``ncdc run``'s parser imports this module, so torch, numpy and the backends are imported by the
functions that use them.
"""
from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass, field

SYNTHETIC = "synthetic"


@dataclass
class RankPlan:
    """What one process runs: a morphism under a binding, with its weights and inputs.
    ``model_specs``: a function giving the whole model's parameter specs (for keys of a file
    written from an enclosing block), or None."""

    morphism: object
    env: object
    source: str
    map: str | None = None
    key_prefix: str | None = None
    weights: tuple = ()
    dtype: str = "float32"
    quant: str = "exact"
    reading: str = "faithful"
    seed: int = 0
    stand_in: bool = False
    inputs: str | None = None
    depth: int = 2
    model_specs: object = None
    nproc: int = 1  # > 1: one rank of a sharded run (ncdc/distributed.py)
    runtime: frozenset = frozenset()  # generated runtime features (codegen.RUNTIME) it uses


@dataclass
class RankResult:
    outputs: list
    lives: list
    tape: dict
    blocks: list
    load: object
    seconds: dict = field(default_factory=dict)
    peak: int = 0
    tensors: str = ""


def open_source(plan: RankPlan):
    """The tensors ``plan`` loads (None for synthetic weights): a weights file, or a checkpoint
    seen through its map."""
    from ncdc.checkpoint.files import open_source as open_

    if plan.source == SYNTHETIC:
        return None
    return open_(plan.source, plan.map, dtype=plan.dtype)


def build_and_load(plan: RankPlan):
    """``(built, load report, seconds)``: the module of ``plan`` built on the meta device and
    filled from its weights. Synthetic weights draw the data the spec leaves to the user too,
    said in one line on stderr (not one warning per array)."""
    from ncdc.interpreter.storage_policy import StoragePolicy

    t0 = time.perf_counter()
    policy = StoragePolicy.parse(plan.weights)
    quiet = plan.source == SYNTHETIC and not plan.stand_in
    with warnings.catch_warnings(record=quiet) as drawn:
        if quiet:
            warnings.simplefilter("always")
        built, report, t1 = _build_and_materialize(plan, policy)
    if quiet:
        names = []
        for w in drawn:
            text = str(w.message)
            if not text.endswith(STAND_IN_NOTE):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            elif text[:-len(STAND_IN_NOTE)] not in names:
                names.append(text[:-len(STAND_IN_NOTE)])
        if names:
            print(f"note: synthetic weights: seeded stand-ins also for the data the spec leaves "
                  f"to the user ({', '.join(names)})", file=sys.stderr)
    return built, report, {"build": t1 - t0, "load": time.perf_counter() - t1}


STAND_IN_NOTE = ": seeded stand-in values, not the model's data"
"""The end of the generated files' warning for each stood-in array (codegen/prelude/fixed.py)."""


def _build_and_materialize(plan: RankPlan, policy):
    """``(built, load report, time built)`` of :func:`build_and_load`."""
    from ncdc.checkpoint.keys import resolve
    from ncdc.checkpoint.module import build_meta, materialize

    from .synthetic import SyntheticSource

    built = build_meta(plan.morphism, plan.env, quant=plan.quant, reading=plan.reading,
                       dtype=plan.dtype, stand_in=plan.stand_in or plan.source == SYNTHETIC,
                       weights=policy if policy.rules else None,
                       runtime=plan.runtime | ({"distributed"} if plan.nproc > 1 else set()))
    if plan.nproc > 1:
        shard_built(built)
    t1 = time.perf_counter()
    synthetic = plan.source == SYNTHETIC
    source = SyntheticSource(built.specs, plan.env, plan.seed) if synthetic \
        else open_source(plan)
    try:
        key_map, prefix = {}, ""
        if synthetic:
            key_map = {k: k for k in source.names()}
        elif source is not None:
            specs = list(built.specs.values())
            key_map, prefix = resolve(specs, source.names(), plan.model_specs,
                                      plan.key_prefix)
        report = materialize(built, source, key_map=key_map, seed=plan.seed,
                             synthetic=synthetic, policy=policy if policy.rules else None,
                             prefix=prefix)
        if synthetic:  # drawn, not loaded
            report.loaded, report.loaded_bytes = 0, 0
    finally:
        if source is not None:
            source.close()
    return built, report, t1


def read_inputs(plan: RankPlan):
    """Inputs (numpy) and their masks (or None) in dom order."""
    from ncdc import interpreter
    from ncdc.ir.errors import EvaluationError

    n = len(plan.morphism.dom)
    if plan.inputs is None:
        return interpreter.random_inputs(plan.morphism, plan.env, plan.seed), [None] * n
    from ncdc.interpreter.weights import read_npz

    data = read_npz(plan.inputs)
    xs, lives = [], []
    for k in range(n):
        name = next((c for c in (f"in{k}", f"arr_{k}") if c in data), None)
        if name is None:
            raise EvaluationError(f"{plan.inputs}: no array in{k} (input {k} of {n})")
        xs.append(data[name])
        live = data.get(f"live{k}")
        lives.append(None if live is None else live.astype(bool))
    return xs, lives


def _torch(a, dtype):
    """``a`` as a tensor of the module's dtype (complex and integer arrays keep their kind)."""
    from ncdc.verify.check import to_torch

    return to_torch(a, dtype)


def run_rank(plan: RankPlan, save_params: str | None = None,
             save_meta: dict | None = None) -> RankResult:
    """Build, load and run one module: the unit a process (or a distributed rank) runs;
    ``save_params``: a file to write the loaded weights to (interpreter keys and layout), with
    the metadata ``save_meta``."""
    import numpy as np
    import torch

    from ncdc import interpreter
    from ncdc.checkpoint.errors import CheckpointError
    from ncdc.checkpoint.module import missing_user_data
    from ncdc.checkpoint.profile import Profiler, peak_bytes
    from ncdc.codegen.boundary import mask_names

    built, report, seconds = build_and_load(plan)
    lacking = missing_user_data(built.module)
    if lacking:
        raise CheckpointError(f"data the spec leaves to the user is not in the weights: "
                              f"{', '.join(lacking)} (give it, or use --stand-in for seeded "
                              "stand-ins)")
    g, module = built.generated, built.module
    if save_params:
        from ncdc.checkpoint.module import interpreter_arrays
        from ncdc.commands.output import write_output
        from ncdc.interpreter.weights import save_params as save

        arrays = interpreter_arrays(built)
        write_output(save_params, lambda tmp: save(arrays, tmp, metadata=save_meta),
                     "--save-params")
    xs, lives = read_inputs(plan)
    if plan.nproc > 1:
        xs, lives = split_batch(xs, lives, plan.morphism.dom)
    args = [_torch(x if m is None else np.where(m, x, 0), built.dtype)
            for x, m in zip(xs, lives, strict=True)]
    names = mask_names(module, plan.morphism.dom)
    kwargs = {names[k]: torch.from_numpy(m) for k, m in enumerate(lives)
              if m is not None and k in names}
    tape = {}
    if g.root.uses_tape:
        given = interpreter.random_tape(plan.morphism, plan.env, plan.seed)
        tape = {g.slot_keys[uid]: _torch(v, built.dtype) for uid, v in given.items()
                if uid in g.slot_keys}
        kwargs["tape"] = tape
    prof = Profiler(module, plan.depth)
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            out = module(*args, **kwargs)
    finally:
        prof.remove()
    seconds["forward"] = time.perf_counter() - t0
    flat = list(out) if isinstance(out, tuple) else [out]
    outputs, out_lives = [], []
    for _arr, st, _ in g.root.outputs:
        outputs.append(flat.pop(0))
        out_lives.append(flat.pop(0) if st is not None else None)
    return RankResult(outputs, out_lives, tape, list(prof.rows.values()), report, seconds,
                      peak_bytes())


def batch_bounds(n: int, world: int) -> list[int]:
    """Where each rank's rows of a batch of ``n`` start, and the end (contiguous, uneven when
    ``world`` does not divide ``n``)."""
    return [n * r // world for r in range(world + 1)]


def shard_built(built) -> None:
    """Shard a module built on the meta device (``ncdc.checkpoint.module.build_meta``) over
    every rank of the default group, before it is given memory, with the generated file's own
    ``shard``."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    built.namespace.shard(built.module, init_device_mesh(device, (dist.get_world_size(),)))
    built.sharded = True
    # the weights overwrite reset_parameters' draws: DTensor's caveat about random numbers
    # on CPU meshes does not apply
    warnings.filterwarnings("ignore", "DTensor random operators")
    del torch


def split_batch(xs: list, lives: list, dom) -> tuple[list, list]:
    """This rank's rows of inputs with a leading batch dim beyond their domain shape (the
    same contiguous split for all, :func:`batch_bounds`); inputs without one are whole on
    every rank (each rank then computes the same outputs)."""
    import torch.distributed as dist

    extra = [x.ndim - len(a.shape) for x, a in zip(xs, dom, strict=False)]
    if not xs or min(extra) < 1:
        return xs, lives
    rank, world = dist.get_rank(), dist.get_world_size()
    n = max(x.shape[0] for x in xs)
    lo, hi = batch_bounds(n, world)[rank], batch_bounds(n, world)[rank + 1]

    def part(a):
        return None if a is None else (a[lo:hi] if a.shape[0] == n else a)
    return [part(x) for x in xs], [part(m) for m in lives]


__all__ = ["SYNTHETIC", "RankPlan", "RankResult", "batch_bounds", "build_and_load", "open_source",
           "read_inputs", "run_rank", "shard_built", "split_batch"]
