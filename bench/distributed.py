"""Benchmark: a block sharded over N gloo processes (expert parallel + FSDP2), one run.

Prints, for every rank count asked for:

* parameter bytes per rank against the single process: the expert slices (goal: 1/N of the
  experts, up to the uneven split ``expert_bounds`` makes) and the rest, sharded by FSDP2 (goal:
  1/N, up to FSDP's row chunks), beside the cost model's count (``ncdc.ir.cost``: learned
  elements of the block, and of its parameters on a top-k sparse axis, times the element size,
  over N);
* bytes the expert exchange moves per token, both ways, against the theoretical
  ``tokens x k x m x element size x 2`` (every pair's input row out, its result back): all the
  rows handed to ``all_to_all_single`` and the part of them bound for other ranks (a pair whose
  expert lives on its own rank stays in memory). The cost model has no communication count.
* the seconds of each phase on the slowest rank (one run: a figure, not a speed claim).

    python bench/distributed.py [--block "Sliding Window Layer"] [--preset tiny] [--nproc 2 4]
                                [--batch 4] [--dtype float64]
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
from ncdc.codegen import compile_torch, load_interpreter_params
from ncdc.interpreter.inputs import random_inputs
from ncdc.ir.axes import SparseAxis
from ncdc.ir.cost import cost

import ncdc
from ncdc.distributed import launch, sharded_run


def _cost_model(run):
    """(k of the first top-k sparse axis, element count of the learned parameters whose active
    share is that axis's k/e, all learned elements), bound, from the cost model."""
    env = run.env
    axes = _sparse_axes(run.morphism)
    if not axes:
        return 0, 0, int(env.subs(cost(run.morphism).learned))
    k, e = int(env.subs(axes[0].activity)), int(env.subs(axes[0].size))
    c = cost(run.morphism)
    experts = sum(int(env.subs(p.count * p.elements)) for p in c.params
                  if p.learned and int(env.subs(p.active)) * e == int(env.subs(p.elements)) * k
                  and k < e)
    return k, experts, int(env.subs(c.learned))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--block", default="Sliding Window Layer")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()

    spec = ncdc.load()
    target = spec.block(args.block)
    run = ncdc.interpret(target, preset=args.preset, stand_in=True)
    source, module = compile_torch(run.morphism, run.env, stand_in=True, dtype=args.dtype)
    load_interpreter_params(module, run.params)
    env = run.env
    inputs = [np.stack(parts) for parts in zip(*(random_inputs(run.morphism, env, seed=s)
                                                 for s in range(args.batch)))]
    size = torch.empty((), dtype=getattr(torch, args.dtype)).element_size()
    single = sum(p.nbytes for p in module.parameters())
    single_experts = sum(getattr(m, a).nbytes for m in module.modules()
                         for a, _ in getattr(type(m), "EXPERT_DIMS", ()))
    k, expert_elems, learned = _cost_model(run)
    m_width = _expert_input_width(module)
    tokens = int(np.prod(inputs[0].shape[:-len(run.dom_shapes()[0])] or (1,))) * \
        int(np.prod([s for s in run.dom_shapes()[0][:-1]] or [1]))
    print(f"{args.block}, preset {args.preset}, batch {args.batch} x "
          f"{run.dom_shapes()[0][:-1]} = {tokens} tokens, {args.dtype}; k = {k}, "
          f"expert input width m = {m_width}")
    print(f"single process: {single:,} parameter bytes ({single_experts:,} in experts); cost "
          f"model: {learned * size:,} ({expert_elems * size:,} on a top-k sparse axis)")
    job = {"source": source, "class_name": type(module).__name__,
           "kwargs": {"stand_in": True} if "stand_in" in _ctor(module) else {},
           "dtype": args.dtype, "params": dict(run.params), "inputs": inputs,
           "count_exchange": True}
    for n in args.nproc:
        res = launch(sharded_run, n, job, timeout=args.timeout)
        print(f"\n{n} ranks:")
        print("rank  rows  experts bytes  (x N / all)  dense bytes  (x N / all)")
        for r, x in enumerate(res):
            dense = x["param_bytes"] - x["expert_bytes"]
            print(f"{r:>4}  {x['rows']:>4}  {x['expert_bytes']:>13,}  "
                  f"{x['expert_bytes'] * n / max(single_experts, 1):>11.3f}  {dense:>11,}  "
                  f"{dense * n / max(single - single_experts, 1):>11.3f}")
        print(f"cost model per rank: experts {expert_elems * size / n:,.0f}, dense "
              f"{(learned - expert_elems) * size / n:,.0f}")
        moved = sum(x["exchange_bytes"] for x in res)
        remote = sum(x["exchange_bytes_remote"] for x in res)
        theory = tokens * k * m_width * size * 2
        print(f"expert exchange per token: {moved / tokens:,.1f} bytes handed to all_to_all, "
              f"{remote / tokens:,.1f} to other ranks; theory k*m*{size}*2 = "
              f"{theory / tokens:,.1f} (ratio {moved / theory:.3f})")
        phases = {p: max(x["seconds"][p] for x in res) for p in res[0]["seconds"]}
        print("seconds (slowest rank): " + ", ".join(f"{p} {s:.2f}" for p, s in phases.items()))


def _ctor(module):
    import inspect
    return inspect.signature(type(module).__init__).parameters


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
