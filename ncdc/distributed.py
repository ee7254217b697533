"""Generated modules on several local processes: a launcher and the sharded forward.

:func:`launch` runs a function on ``nproc`` spawned processes, each in a process group (gloo on
CPU, NCCL when every rank has a GPU) on a free local port, within a time limit and under a
heartbeat: on a failure, a stopped rank or the deadline every rank is killed and the rank that
went wrong first is named; the group is always destroyed in a rank that returns.
:func:`sharded_run` is the rank's work for ``ncdc run --nproc N`` and the tests: the generated
source is executed, its root class built on the meta device, sharded with the file's own
``shard`` (experts by ``shard_experts``, dense parameters by FSDP2), allocated, and each rank
loads only its part of the interpreter-keyed weights (``load_shard``); the inputs' leading
(batch) dim is split over the ranks (unevenly if it must: a rank may have none), the forward runs
and rank 0 gathers the outputs. With ``probes`` it also takes one backward pass of the loss
``sum(output * probe)`` (each rank its rows; the sum over ranks is the single-process loss) and
gathers every parameter's whole gradient.
"""
from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import pickle
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import types
import warnings
from datetime import timedelta
from pathlib import Path

from ncdc.ir.errors import DistributedError, DistributedTimeout, SpecError
from ncdc.rank import batch_bounds, read_inputs, run_rank


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


HEARTBEAT_S = 0.5
"""Seconds between a rank's heartbeats (a thread of its own, so a rank busy in torch beats)."""

STALL_S = 60.0
"""Default seconds without a heartbeat after which a rank counts as stopped or hung."""


def _beat(beats, rank: int) -> None:
    while True:
        beats[rank] = time.monotonic()
        time.sleep(HEARTBEAT_S)


def _rank_main(fn, rank: int, world: int, port: int, backend: str, args: tuple,
               out: str, timeout: float, threads: int, beats=None) -> None:
    if beats is not None:
        threading.Thread(target=_beat, args=(beats, rank), daemon=True).start()
    import torch.distributed as dist

    result: dict = {}
    try:
        if backend == "nccl":
            import torch
            torch.cuda.set_device(rank % torch.cuda.device_count())
        import torch
        torch.set_num_threads(threads)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=timeout))
        try:
            result = {"value": fn(rank, world, *args)}
            dist.barrier()  # rank 0 holds the group's store: no rank leaves before all are done
        finally:
            dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises
        result = {"error": traceback.format_exc(), "message": _one_line(exc)}
    with open(out, "wb") as f:
        pickle.dump(result, f)
    # the group is destroyed and the result written: leave without the interpreter's shutdown,
    # whose C++ static destructors (torch's and gloo's threads) can abort a rank that finished
    # cleanly ("terminate called without an active exception"); a failed rank exits 1 and the
    # launcher stops every rank at once
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if "error" in result else 0)


def _one_line(exc: BaseException) -> str:
    """A rank's error as one line: a typed ncdc error's message, else the exception's type and
    the first line of its message."""
    text = str(exc).strip()
    if isinstance(exc, SpecError):
        return " ".join(text.split("\n"))
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


@dataclasses.dataclass
class _Watch:
    """What the launcher saw first go wrong: a rank that exited with a failure (``exitcode``),
    a rank whose heartbeat stopped (``stalled``), or the deadline."""

    rank: int | None = None
    exitcode: int | None = None
    stalled: float | None = None
    timed_out: bool = False


def _watch(procs, beats, deadline: float, stall: float) -> _Watch:
    """Poll ``procs`` until all exit, one fails, one's heartbeat is ``stall`` seconds old (a
    rank that has not beaten yet is bounded by the deadline only) or the deadline passes."""
    while any(p.is_alive() for p in procs):
        now = time.monotonic()
        failed = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
        if failed:  # a rank killed by a signal is the cause of the others' failures
            r, code = min(failed, key=lambda rc: (rc[1] >= 0, rc[0]))
            return _Watch(rank=r, exitcode=code)
        for r, p in enumerate(procs):
            if p.is_alive() and beats[r] and now - beats[r] > stall:
                return _Watch(rank=r, stalled=now - beats[r])
        if now > deadline:
            return _Watch(timed_out=True)
        time.sleep(0.05)
    failed = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
    if failed:
        r, code = min(failed, key=lambda rc: (rc[1] >= 0, rc[0]))
        return _Watch(rank=r, exitcode=code)
    return _Watch()


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def launch(fn, nproc: int, *args, timeout: float = 120.0, backend: str | None = None,
           threads: int | None = None, stall: float | None = None) -> list:
    """``[fn(rank, nproc, *args) for every rank]``, each run in its own spawned process inside
    an initialised default process group, with ``threads`` torch threads (default: the cores
    shared out, at least one). ``fn`` and ``args`` must pickle (``fn`` a module-level
    function).

    Every rank beats (:data:`HEARTBEAT_S`); the launcher kills every rank as soon as one
    fails, one's heartbeat is ``stall`` seconds old (default ``min(timeout,`` :data:`STALL_S`
    ``)``: a stopped or hung process) or ``timeout`` seconds have passed, and names the rank
    that went wrong first: DistributedError with its error in one line (its traceback in
    ``rank_traceback``) or the signal that killed it; DistributedTimeout (a TimeoutError) for
    a stalled rank or the deadline."""
    import torch

    if nproc < 1:
        raise ValueError("nproc must be at least 1")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= nproc \
            else "gloo"
    if threads is None:
        threads = max(1, (os.cpu_count() or 1) // nproc)
    stall = min(timeout, STALL_S) if stall is None else stall
    ctx = multiprocessing.get_context("spawn")
    beats = ctx.Array("d", nproc, lock=False)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="ncdc-ranks-") as tmp:
        outs = [os.path.join(tmp, f"rank{r}.pkl") for r in range(nproc)]
        procs = [ctx.Process(target=_rank_main, daemon=True,
                             args=(fn, r, nproc, port, backend, args, outs[r], timeout,
                                   threads, beats))
                 for r in range(nproc)]
        deadline = time.monotonic() + timeout
        seen = _Watch(timed_out=True)
        try:
            for p in procs:
                p.start()
            seen = _watch(procs, beats, deadline, stall)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
            for p in procs:
                if p.pid is not None:
                    p.join(5)
        results = []
        for path in outs:
            if Path(path).exists():
                with open(path, "rb") as f:
                    results.append(pickle.load(f))
            else:
                results.append(None)
    _raise_for(seen, results, nproc, timeout)
    return [res["value"] for res in results]


def _raise_for(seen: _Watch, results: list, nproc: int, timeout: float) -> None:
    """The launcher's error for what it saw (nothing when every rank returned a value)."""
    if seen.stalled is not None:
        raise DistributedTimeout(f"rank {seen.rank} of {nproc} stopped responding: no "
                                 f"heartbeat for {seen.stalled:.0f} s (stopped or hung); "
                                 "every rank was stopped", rank=seen.rank)
    if seen.rank is not None:
        r, res = seen.rank, results[seen.rank]
        if res is not None and "error" in res:
            raise DistributedError(f"rank {r} of {nproc} failed: "
                                   f"{res.get('message', res['error'])}", rank=r,
                                   rank_traceback=res["error"])
        how = f"was killed by {_signal_name(seen.exitcode)}" if (seen.exitcode or 0) < 0 \
            else f"ended with exit code {seen.exitcode} and no result"
        raise DistributedError(f"rank {r} of {nproc} {how}; every rank was stopped", rank=r)
    if seen.timed_out:
        running = [r for r, res in enumerate(results) if res is None]
        raise DistributedTimeout(f"{nproc} ranks did not finish within {timeout:g} s "
                                 f"(still running: rank {', '.join(map(str, running))}); "
                                 "every rank was stopped")
    for r, res in enumerate(results):
        if res is None or "error" in res:
            raise DistributedError(f"rank {r} of {nproc} ended without a result", rank=r,
                                   rank_traceback=(res or {}).get("error", ""))


def sharded_run(rank: int, world: int, job: dict) -> dict:
    """One rank of a sharded forward (and, with ``job["probes"]``, backward) of generated code.

    ``job``: ``source`` (the generated file), ``class_name``, ``kwargs`` (constructor),
    ``dtype`` (a torch dtype name), ``params`` (interpreter key -> array, or a weights file
    path), ``inputs`` (arrays sharing a leading batch dim that is split over the ranks),
    optional ``probes`` (one array per output, shaped like it), ``count_exchange`` (count
    the bytes the expert exchange sends) and ``values`` (gather every parameter whole). Rank 0's
    result holds ``outputs`` (whole), with probes ``grads`` (state_dict key -> whole gradient)
    and with ``values`` ``values`` (state_dict key -> whole tensor; 8- and 16-bit floats as
    integers of their width); every rank's holds ``param_bytes`` (what it allocated for
    parameters; ``expert_bytes`` of them in expert slices, ``stored_bytes`` in the other weights
    held in storage formats, whole on every rank), ``rows`` (its part of the batch), ``exchange_bytes`` (handed to the expert
    exchange; ``exchange_bytes_remote`` of them bound for other ranks) and ``seconds`` per
    phase.
    """
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    clock = [time.perf_counter()]
    seconds = {}

    def lap(name):
        now = time.perf_counter()
        seconds[name] = now - clock[0]
        clock[0] = now

    device = torch.device("cuda", torch.cuda.current_device()) \
        if dist.get_backend() == "nccl" else torch.device("cpu")
    dtype = getattr(torch, job["dtype"])
    mod = _load_source(job["source"])
    sent = [0, 0]  # bytes handed to the expert exchange; of them, bytes for other ranks
    if job.get("count_exchange"):
        exchange = mod._exchange

        def counted(x, out_sizes, in_sizes, group):
            row = x.element_size() * (x[0].numel() if x.shape[0] else 0)
            sent[0] += row * x.shape[0]
            sent[1] += row * (x.shape[0] - in_sizes[dist.get_rank(group)])
            return exchange(x, out_sizes, in_sizes, group)
        mod._exchange = counted
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype if dtype in (torch.float32, torch.float64) else old)
    try:
        with torch.device("meta"):
            model = getattr(mod, job["class_name"])(**job.get("kwargs", {})).to(dtype)
    finally:
        torch.set_default_dtype(old)
    lap("build")
    mesh = init_device_mesh(device.type, (world,))
    mod.shard(model, mesh)
    lap("shard")
    model.to_empty(device=device)
    with torch.no_grad(), warnings.catch_warnings():
        # buffers (tables) and anything the weights do not cover; the weights overwrite the
        # random draws, so DTensor's caveat about random numbers on CPU meshes does not apply
        warnings.filterwarnings("ignore", "DTensor random operators")
        for m in model.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
    params = job["params"]
    if isinstance(params, (str, Path)):
        from ncdc.interpreter.weights import load_params
        params = load_params(params)
    mod.load_shard(model, params)
    lap("load")
    from torch.distributed.tensor import DTensor
    param_bytes = sum((p.to_local() if isinstance(p, DTensor) else p).nbytes
                      for p in model.parameters())
    experts = [getattr(m, attr) for m in model.modules() if hasattr(m, "experts")
               for attr, _ in type(m).EXPERT_DIMS]
    expert_bytes = sum(_nbytes(x) for x in experts)
    stored_bytes = sum(_nbytes(m) for m in model.modules()
                       if hasattr(m, "encode_") and not any(m is x for x in experts))
    inputs = [np.asarray(x) for x in job["inputs"]]
    bounds = batch_bounds(inputs[0].shape[0], world) if inputs else [0] * (world + 1)
    lo, hi = bounds[rank], bounds[rank + 1]
    mine = [torch.as_tensor(x[lo:hi]).to(device) for x in inputs]
    mine = [x.to(dtype) if x.is_floating_point() else x for x in mine]
    probes = job.get("probes")
    with contextlib.nullcontext() if probes else torch.no_grad():
        outs = model(*mine)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    lap("forward")
    result = {"param_bytes": param_bytes, "expert_bytes": expert_bytes,
              "stored_bytes": stored_bytes, "rows": hi - lo,
              "exchange_bytes": sent[0], "exchange_bytes_remote": sent[1], "seconds": seconds}
    if probes:
        loss = sum((y * torch.as_tensor(p[lo:hi]).to(device, y.dtype)).sum()
                   for y, p in zip(outs, probes, strict=True) if y.is_floating_point())
        loss.backward()
        lap("backward")
        grads = mod.gather_full(model, grads=True)
        if rank == 0:
            result["grads"] = {k: None if g is None else g.detach().cpu().numpy()
                               for k, g in grads.items()}
    if job.get("values"):
        values = mod.gather_full(model)
        if rank == 0:
            result["values"] = {k: _numpy_bits(v) for k, v in values.items()}
    local = [y.detach().cpu().numpy() for y in outs]
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(local, gathered, dst=0)
    if rank == 0:
        result["outputs"] = [np.concatenate([g[k] for g in gathered]) for k in range(len(local))]
    lap("gather")
    return result


def _nbytes(member) -> int:
    """Bytes of a tensor, or of a module's parameters (a StoredWeight: codes and scales)."""
    if hasattr(member, "parameters"):
        return sum(p.nbytes for p in member.parameters())
    return member.nbytes


def _numpy_bits(t):
    """``t`` as a numpy array; dtypes numpy lacks (8- and 16-bit floats) as integers of their
    width, bit for bit."""
    import torch

    t = t.detach().cpu()
    if t.is_floating_point() and t.element_size() < 4:
        t = t.view(torch.uint8 if t.element_size() == 1 else torch.int16)
    return t.numpy()


def _load_source(source: str):
    """Generated source executed as a fresh module (without importing the compiler)."""
    name = f"ncdc_rank_module_{len([m for m in sys.modules if m.startswith('ncdc_rank_')])}"
    mod = types.ModuleType(name)
    mod.__file__ = f"<{name}>"
    sys.modules[name] = mod
    exec(compile(source, mod.__file__, "exec"), mod.__dict__)  # noqa: S102 - ncdc's own output
    return mod


def _rank_of_plan(rank: int, world: int, plan):
    """One rank of ``ncdc run --nproc``: the run; rank 0 returns it with every rank's outputs
    joined along the batch (when split) and the largest peak memory, the others nothing."""
    import numpy as np
    import torch.distributed as dist

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "DTensor random operators")
        res = run_rank(plan)
    local = [(o.detach().cpu(), None if lv is None else lv.detach().cpu())
             for o, lv in zip(res.outputs, res.lives, strict=True)]
    gathered = [None] * world if rank == 0 else None
    dist.gather_object((local, res.peak), gathered, dst=0)
    if rank != 0:
        return None
    import torch
    if _splits(plan):
        outs = [torch.cat([g[0][k][0] for g in gathered]) for k in range(len(local))]
        lives = [None if local[k][1] is None else
                 torch.cat([torch.as_tensor(g[0][k][1]).expand(g[0][k][0].shape)
                            for g in gathered]) for k in range(len(local))]
        res.outputs, res.lives = outs, lives
    res.peak = max(int(np.int64(g[1])) for g in gathered)
    res.blocks = list(res.blocks)
    return res


def _splits(plan) -> bool:
    """Whether ``plan``'s inputs carry a batch dim that the ranks split (:func:`ncdc.rank.split_batch`)."""
    xs, _ = read_inputs(plan)
    return bool(xs) and min(x.ndim - len(a.shape) for x, a in zip(xs, plan.morphism.dom, strict=False)) >= 1


RUN_TIMEOUT_S = 600.0
"""Default time limit of ``ncdc run --nproc`` (``--timeout``)."""


def run_sharded(plan, timeout: float = RUN_TIMEOUT_S, stall: float | None = None):
    """``ncdc run --nproc N``: ``plan`` on ``plan.nproc`` local ranks; rank 0's result.
    ``timeout`` and ``stall`` as for :func:`launch`."""
    if plan.model_specs is not None:  # a closure: evaluate it here, hand the ranks a list
        plan = dataclasses.replace(plan, model_specs=_Given(plan.model_specs()))
    return launch(_rank_of_plan, plan.nproc, plan, timeout=timeout, stall=stall)[0]


class _Given:
    """A picklable function returning the value it was given."""

    def __init__(self, value):
        self.value = value

    def __call__(self):
        return self.value


def sharded_runs(rank: int, world: int, jobs: list) -> list:
    """:func:`sharded_run` for every job, in order, in the same process group."""
    return [sharded_run(rank, world, job) for job in jobs]


__all__ = ["HEARTBEAT_S", "RUN_TIMEOUT_S", "STALL_S", "free_port", "launch", "run_sharded",
           "sharded_run", "sharded_runs"]
