"""Benchmark of incremental decoding (``prefill``/``step``, ``codegen/decoder.py``): ratios
measured in one run.

For a block (default: layer 0, ``Sliding Window Layer``) at the ``medium`` preset, float32, and
each context length C (default 128, 1024, 8192): the state after C tokens (a ``prefill`` of
C tokens), then the latency of producing token C + 1

* by ``step`` on that one token with the state (goal: at C = 8192 within 1.2x of C = 128, the
  window bounds the work), against
* recomputing the whole sequence of C + 1 tokens with ``forward`` (grows with C);

the two interleaved (one call of each in turn, ``--repeat`` rounds after a warm-up), min and
median printed, torch pinned to one thread and again at the default thread count; and the bytes
the state holds at each C (goal: constant once C exceeds the window). The step's output is first
checked against the recomputed last token.

Then the step compiled whole (``torch.compile(step, fullgraph=True)``, inductor, the experts'
static-shape path) against the eager step (the default module, and the static-shape one), per
token at the longest context, interleaved, at one thread and the default count (compiled anew
for each: inductor's CPU kernels are specialised to the thread count), with the compile time
(the first call, caches off) and the compilations over one step at every context (goal: 1, the state's
shapes do not depend on the context).

Run with ``python bench/decode.py [--block B|"(model)"] [--contexts 128,1024,8192] [--repeat 5]
[--clock wall|cpu] [--no-compile]``.
"""
from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]

import ncdc
from ncdc import codegen, interpreter
from ncdc.codegen.decoder import token_input
from ncdc.ir.axes import is_token_axis

DEFAULT_THREADS = torch.get_num_threads()


CLOCK = time.perf_counter
"""Wall clock; ``--clock cpu``: this process's CPU time (all its threads), for a loaded machine
where the wall clock mostly measures the other jobs."""


def race(fns: dict, repeat: int) -> dict:
    """Seconds per call: one warm-up call each, then ``repeat`` rounds calling each in turn."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = CLOCK()
            fn()
            times[name].append(CLOCK() - t0)
    return times


def ms(ts) -> str:
    return f"{min(ts) * 1e3:9.2f} / {statistics.median(ts) * 1e3:9.2f} ms"


def ratio(a, b) -> str:
    return f"{min(a) / min(b):6.2f}x / {statistics.median(a) / statistics.median(b):6.2f}x"


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def state_bytes(state: dict) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def compiled_steps(module, static, steps_at: dict, repeat: int) -> None:
    """The compiled step against the eager ones (see the module docstring); ``steps_at``:
    context -> (new inputs, state)."""
    import torch._dynamo
    import torch._inductor.config
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._inductor.config.force_disable_caches = True  # a cold compile time at each count
    last = max(steps_at)
    new, state = steps_at[last]
    rows = {}
    for threads in (1, DEFAULT_THREADS):
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        counter = CompileCounterWithBackend("inductor")
        step = torch.compile(static.step, fullgraph=True, backend=counter)
        t0 = time.perf_counter()
        got, _ = step(*new, state=state)
        took = time.perf_counter() - t0
        want = _first(module.step(*new, state=state)[0])
        err = float((_first(got) - want).abs().max() / want.abs().max())
        for n, st in steps_at.values():
            step(*n, state=st)
        times = race({"eager": lambda: module.step(*new, state=state),
                      "eager static": lambda: static.step(*new, state=state),
                      "compiled": lambda step=step: step(*new, state=state)}, repeat)
        rows[threads] = (times, took, counter.frame_count, err)
    torch.set_num_threads(1)
    print(f"\nstep compiled whole (inductor, fullgraph, static-shape experts) at context {last}, "
          f"1 thread | {DEFAULT_THREADS} threads")
    for name in ("eager", "eager static", "compiled"):
        print(f"  {name:<13} {ms(rows[1][0][name])} | {ms(rows[DEFAULT_THREADS][0][name])}")
    for name in ("eager", "eager static"):
        print(f"{name} / compiled: {ratio(rows[1][0][name], rows[1][0]['compiled'])} | "
              f"{ratio(rows[DEFAULT_THREADS][0][name], rows[DEFAULT_THREADS][0]['compiled'])}")
    print(f"compile time (first call, caches off): {rows[1][1]:.1f} s | {rows[DEFAULT_THREADS][1]:.1f} s; "
          f"compilations over a step at each of {len(steps_at)} contexts (goal 1): "
          f"{rows[1][2]} | {rows[DEFAULT_THREADS][2]}; compiled vs eager rel. diff "
          f"{rows[1][3]:.1e} | {rows[DEFAULT_THREADS][3]:.1e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block", default="Sliding Window Layer")
    ap.add_argument("--preset", default="medium")
    ap.add_argument("--contexts", default="128,1024,8192")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--no-compile", action="store_true", help="skip the compiled step")
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    contexts = [int(c) for c in args.contexts.split(",")]
    spec = ncdc.load()
    env = spec.bind(args.preset).env
    block = spec.model() if args.block == "(model)" else spec.block(args.block)
    tin = token_input(block)
    if tin is None:
        raise SystemExit(f"{args.block} has no token axis")
    run = interpreter.interpret(block, env, stand_in=True)
    g = codegen.generate(block, env, runtime={"loader", "decoding"})
    mod = codegen.load_module(g.source)
    kwargs = {"quant": "exact"} if g.root.needs_quant else {}
    module = codegen.instantiate(mod, g.class_name, torch.float32, **kwargs)
    g.load_params(module, run.params)
    static = module
    if "static_shapes" in inspect.signature(getattr(mod, g.class_name)).parameters:
        static = codegen.instantiate(mod, g.class_name, torch.float32, static_shapes=True,
                                     **kwargs)
        g.load_params(static, run.params)
    if not hasattr(module, "prefill"):
        raise SystemExit(f"{args.block} has no prefill/step (not incremental or per token)")
    # inputs for the longest context: the seeded interpreter inputs' slices, tiled along tokens
    base = interpreter.random_inputs(block, env, 0)
    rng = np.random.default_rng(0)
    longest = max(contexts) + 1
    full, dims = [], []
    for k, arr in enumerate(block.dom):
        shape = list(np.shape(base[k]))
        tok = [i for i, a in enumerate(arr.shape) if is_token_axis(a)]
        for i in tok:
            shape[i] = longest
        dims.append(tok[0] if tok else None)
        if np.issubdtype(np.asarray(base[k]).dtype, np.integer):  # token ids
            full.append(torch.from_numpy(rng.integers(0, int(np.max(base[k])) + 1, shape)))
        else:
            full.append(torch.from_numpy(rng.standard_normal(shape)).float())
    out = block.cod[0].shape  # the token dim of the first output, counted from the end
    dim = next(i for i, a in enumerate(out) if is_token_axis(a)) - len(out)

    def upto(lo, hi):
        return [x if d is None else x.narrow(d, lo, hi - lo) for x, d in zip(full, dims, strict=True)]

    torch.set_num_threads(1)
    print(f"{args.block}, preset {args.preset}, float32, torch {torch.__version__}; "
          f"min / median over {args.repeat} interleaved rounds, {args.clock} clock")
    rows, steps, recomputes, states, steps_at = {}, {}, {}, {}, {}
    with torch.no_grad():
        for c in contexts:
            _, state = module.prefill(*upto(0, c))
            new = upto(c, c + 1)
            step_out, _ = module.step(*new, state=state)
            whole = _first(module(*upto(0, c + 1)))
            last = whole.narrow(dim, c, 1)
            err = float((_first(step_out) - last).abs().max() / last.abs().max())
            steps[c] = lambda new=new, state=state: module.step(*new, state=state)
            recomputes[c] = lambda c=c: module(*upto(0, c + 1))
            states[c] = (state, err)
            steps_at[c] = (new, state)
            print(f"  context {c:>5}: state {state_bytes(state):>8} B "
                  f"({', '.join(f'{k}{list(v.shape)}' for k, v in state.items())}); "
                  f"step vs recompute rel. diff {err:.1e}", flush=True)
        # the steps at every context are the compared runs: interleaved with each other, apart
        # from the recomputations (whose large arrays would evict the step's data between calls)
        timed = {}
        for threads in (1, DEFAULT_THREADS):
            torch.set_num_threads(threads)
            timed[threads] = (race(steps, args.repeat), race(recomputes, args.repeat))
        torch.set_num_threads(1)
        for c in contexts:
            one = {"step": timed[1][0][c], "recompute": timed[1][1][c]}
            many = {"step": timed[DEFAULT_THREADS][0][c],
                    "recompute": timed[DEFAULT_THREADS][1][c]}
            rows[c] = (one, many, state_bytes(states[c][0]), states[c][1])
    print(f"\nper-token latency, 1 thread | {DEFAULT_THREADS} threads")
    for c, (one, many, _b, _e) in rows.items():
        print(f"  context {c:>5}  step      {ms(one['step'])} | {ms(many['step'])}")
        print(f"  context {c:>5}  recompute {ms(one['recompute'])} | {ms(many['recompute'])}")
    first, last = contexts[0], contexts[-1]
    a, b = rows[last], rows[first]
    print(f"\nstep at {last} / step at {first} (goal <= 1.2x): "
          f"{ratio(a[0]['step'], b[0]['step'])} | {ratio(a[1]['step'], b[1]['step'])}")
    for c, (one, many, _b, _e) in rows.items():
        print(f"recompute / step at {c:>5}: {ratio(one['recompute'], one['step'])} | "
              f"{ratio(many['recompute'], many['step'])}")
    sizes = {c: r[2] for c, r in rows.items()}
    print(f"state bytes by context: {sizes} (goal: constant past the window)")
    if not args.no_compile:
        with torch.no_grad():
            compiled_steps(module, static, steps_at, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
