"""Benchmark: a block sharded over N gloo processes (expert parallel + FSDP2), one run.

Prints, for every rank count asked for:

* parameter bytes per rank against the single process, for every weight storage format asked
  for (``--formats``: ``float`` holds every weight in the dtype, a format holds every learned
  weight in it, ``mixed`` the experts in mxfp4 and the rest in bfloat16): the expert slices
  (goal: 1/N of the experts, codes and scales, up to the uneven split ``expert_bounds``
  makes) and the rest, sharded by FSDP2 (goal: 1/N, up to FSDP's row chunks) except weights
  held in a storage format, which every rank holds whole; beside the cost model's count
  (``ncdc.ir.cost``: bytes of the block's learned arrays at the format, of those on a top-k
  sparse axis over N);
* bytes the expert exchange moves per token, both ways, against the theoretical
  ``tokens x k x m x element size x 2`` (every pair's input row out, its result back): all the
  rows handed to ``all_to_all_single`` and the part of them bound for other ranks (a pair whose
  expert lives on its own rank stays in memory). The cost model has no communication count.
* the seconds of each phase on the slowest rank (one run: a figure, not a speed claim).

    python bench/distributed.py [--block "Sliding Window Layer"] [--preset tiny] [--nproc 2 4]
                                [--batch 4] [--dtype float64] [--formats float mxfp4 ...]
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

import ncdc
from ncdc.codegen.generate import generate, instantiate, load_module
from ncdc.distributed import launch, sharded_runs
from ncdc.interpreter.inputs import random_inputs
from ncdc.interpreter.storage_policy import StoragePolicy
from ncdc.ir.axes import SparseAxis
from ncdc.ir.cost import cost

MIXED = ("*Routed Experts*=mxfp4", "*=bfloat16")  # --formats mixed
FORMAT_OF = {"mixed": ("mxfp4", "bfloat16")}  # (experts, rest) for the cost model


def _cost_model(run, fmt, size):
    """(k of the first top-k sparse axis, bytes of the learned parameters whose active share is
    that axis's k/e, bytes of the others), bound, from the cost model; ``fmt``: ``float``
    (``size`` bytes an element), a storage format, or ``mixed``."""
    env = run.env
    axes = _sparse_axes(run.morphism)
    c = cost(run.morphism)
    k, e = (int(env.subs(axes[0].activity)), int(env.subs(axes[0].size))) if axes else (0, 0)
    on_experts, rest = FORMAT_OF.get(fmt, (fmt, fmt))

    def nbytes(p, f):
        return int(env.subs(p.count * p.elements * size if f == "float" else p.bytes_at(f)))
    experts = dense = 0
    for p in c.params:
        if not p.learned:
            continue
        if axes and k < e and int(env.subs(p.active)) * e == int(env.subs(p.elements)) * k:
            experts += nbytes(p, on_experts)
        else:
            dense += nbytes(p, rest)
    return k, experts, dense


def _module(run, fmt, dtype):
    """(source, class name, constructor kwargs, module with the run's weights) of the block
    with the weights of ``fmt`` (``float``: none held in a storage format)."""
    policy = None if fmt == "float" else StoragePolicy.parse(MIXED if fmt == "mixed" else (fmt,))
    g = generate(run.morphism, run.env, weights=policy, runtime={"distributed"})
    pymod = load_module(g.source)
    kwargs = {"stand_in": True} if g.root.needs_stand_in else {}
    module = instantiate(pymod, g.class_name, getattr(torch, dtype), **kwargs)
    pymod.load_interpreter_params(module, run.params)
    return g.source, g.class_name, kwargs, module


def _bytes(module):
    """(expert bytes, all parameter bytes) of a one-process module (a StoredWeight: its codes
    and scales)."""
    experts = sum(p.nbytes for m in module.modules() for a, _ in getattr(type(m), "EXPERT_DIMS",
                                                                         ())
                  for p in (getattr(m, a).parameters() if hasattr(getattr(m, a), "encode_")
                            else [getattr(m, a)]))
    return experts, sum(p.nbytes for p in module.parameters())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--block", default="Sliding Window Layer")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--formats", nargs="+", default=["float", "mxfp8", "mxfp4", "mixed"],
                    choices=["float", "float32", "bfloat16", "mxfp8", "mxfp4", "mixed"])
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()

    spec = ncdc.load()
    target = spec.block(args.block)
    run = ncdc.interpret(target, preset=args.preset, stand_in=True)
    env = run.env
    inputs = [np.stack(parts) for parts in zip(*(random_inputs(run.morphism, env, seed=s)
                                                 for s in range(args.batch)), strict=True)]
    size = torch.empty((), dtype=getattr(torch, args.dtype)).element_size()
    tokens = int(np.prod(inputs[0].shape[:-len(run.dom_shapes()[0])] or (1,))) * \
        int(np.prod([s for s in run.dom_shapes()[0][:-1]] or [1]))
    jobs, single, model = [], {}, {}
    for fmt in args.formats:
        source, class_name, kwargs, module = _module(run, fmt, args.dtype)
        single[fmt] = _bytes(module)
        model[fmt] = _cost_model(run, fmt, size)
        jobs.append({"source": source, "class_name": class_name, "kwargs": kwargs,
                     "dtype": args.dtype, "params": dict(run.params), "inputs": inputs,
                     "count_exchange": True})
    k = model[args.formats[0]][0]
    m_width = _expert_input_width(module)
    print(f"{args.block}, preset {args.preset}, batch {args.batch} x "
          f"{run.dom_shapes()[0][:-1]} = {tokens} tokens, {args.dtype}; k = {k}, "
          f"expert input width m = {m_width}")
    print("single process, parameter bytes (cost model's learned bytes at the format):")
    for fmt in args.formats:
        experts, total = single[fmt]
        _, m_experts, m_dense = model[fmt]
        print(f"  {fmt:>8}: {total:>11,} ({experts:,} in experts); cost model "
              f"{m_experts + m_dense:,} ({m_experts:,} on a top-k sparse axis)")
    for n in args.nproc:
        results = launch(sharded_runs, n, jobs, timeout=args.timeout)
        print(f"\n{n} ranks: bytes per rank (x N / single process)")
        print("  format  rank  rows  experts bytes (x N/all)   dense bytes (x N/all)  of them "
              "stored whole")
        for i, fmt in enumerate(args.formats):
            experts, total = single[fmt]
            for r, res in enumerate(x[i] for x in results):
                dense = res["param_bytes"] - res["expert_bytes"]
                whole = res["stored_bytes"]
                print(f"  {fmt:>6}  {r:>4}  {res['rows']:>4}  {res['expert_bytes']:>13,} "
                      f"({res['expert_bytes'] * n / max(experts, 1):5.3f})  {dense:>11,} "
                      f"({dense * n / max(total - experts, 1):5.3f})  {whole:>12,}")
            _, m_experts, m_dense = model[fmt]
            dense_model = f"{m_dense / n:,.0f} (FSDP2 shards)" if fmt == "float" else \
                f"{m_dense:,} (stored: whole on every rank)"
            print(f"  {fmt:>6}  cost model per rank: experts {m_experts / n:,.0f}, dense "
                  f"{dense_model}")
        res = [x[0] for x in results]
        moved = sum(x["exchange_bytes"] for x in res)
        remote = sum(x["exchange_bytes_remote"] for x in res)
        theory = tokens * k * m_width * size * 2
        print(f"expert exchange per token ({args.formats[0]}; activations, the same for every "
              f"format): {moved / tokens:,.1f} bytes handed to all_to_all, "
              f"{remote / tokens:,.1f} to other ranks; theory k*m*{size}*2 = "
              f"{theory / tokens:,.1f} (ratio {moved / theory:.3f})")
        phases = {p: max(x["seconds"][p] for x in res) for p in res[0]["seconds"]}
        print(f"seconds ({args.formats[0]}, slowest rank): "
              + ", ".join(f"{p} {s:.2f}" for p, s in phases.items()))


def _sparse_axes(morphism):
    """The top-k sparse axes of the morphism's arrays (read off the IR)."""
    from ncdc.ir.walk import walk
    seen = {}
    for site in walk(morphism):
        node = site.node
        for arr in tuple(getattr(node, "dom", ())) + tuple(getattr(node, "cod", ())):
            for a in arr.shape:
                if isinstance(a, SparseAxis):
                    seen.setdefault(a.uid, a)
    return list(seen.values())


def _expert_input_width(module):
    """m: the width of the row each pair sends (the experts' input)."""
    for m in module.modules():
        if getattr(type(m), "INPUT_RANKS", None):
            attr, dim = type(m).EXPERT_DIMS[0]
            return int(np.prod(getattr(m, attr).shape[:dim]))
    return 0


if __name__ == "__main__":
    main()
