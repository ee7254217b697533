"""Benchmark of the PyTorch code generator (ratios printed in one run).

1. generated eager torch against the reference interpreter, whole salvaged prefix at ``medium``
   (goal: >= 20x);
2. generated layer 0 against the hand-written layer 0 of ``bench/handwritten_layer0.py`` on the
   same weights (goal: <= 1.25x; the two are first checked to agree numerically);
3. ``torch.compile`` of a generated block against eager;
4. code generation time for the whole salvaged spec (goal: <= 2 s).

Timings are the best of several runs (the machines are shared); run with
``python bench/codegen.py [--preset medium] [--repeat 5]``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# this file is named like the package it measures: keep bench/ off the import path
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]

from ncdc.codegen.check import run_generated

import ncdc
from ncdc import codegen, interpreter


def _handwritten():
    import importlib.util

    spec = importlib.util.spec_from_file_location("handwritten_layer0",
                                                  os.path.join(HERE, "handwritten_layer0.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def best(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def build(morphism, env, params, dtype="float64"):
    g = codegen.generate(morphism, env)
    mod = codegen.load_module(g.source)
    module = codegen.instantiate(mod, g.class_name, codegen.DTYPES[dtype])
    g.load_params(module, params)
    return g, module


def rel_err(got, want) -> float:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300))


def prefix_vs_interpreter(spec, env, repeat):
    m = interpreter.prefix(spec.data)
    run = interpreter.interpret(m, env, stand_in=True)
    ins = interpreter.random_inputs(m, env, 0)
    tape = interpreter.random_tape(m, env, 0)
    ref = run.evaluate(*ins, tape=tape).outputs
    t_interp = best(lambda: run.evaluate(*ins, tape=tape), repeat)
    out = {}
    for dtype in ("float64", "float32"):
        g, module = build(m, env, run.params, dtype)
        got = run_generated(g, module, ins, tape, dtype)
        err = max(rel_err(v.numpy(), r.values) for (v, _), r in zip(got, ref))
        t = best(lambda g=g, module=module, dtype=dtype: run_generated(g, module, ins, tape,
                                                                     dtype), repeat)
        out[dtype] = (t, err)
    return t_interp, out


def layer0_vs_handwritten(spec, env, repeat):
    Layer0 = _handwritten().Layer0
    m = spec.block("Sliding Window Layer")
    run = interpreter.interpret(m, env, stand_in=True)
    ins = [torch.from_numpy(np.array(a)) for a in interpreter.random_inputs(m, env, 0)]
    _, generated = build(m, env, run.params)
    symbols = {}
    for s in spec.symbols.values():
        symbols.setdefault(s.label, s)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        dense = Layer0.from_env(env, symbols).load_interpreter_params(run.params)
        sparse = Layer0.from_env(env, symbols, sparse_experts=True)
        sparse.load_interpreter_params(run.params)
    finally:
        torch.set_default_dtype(old)
    with torch.no_grad():
        want = generated(*ins)
        errs = [max(rel_err(a.numpy(), b.numpy()) for a, b in zip(hw(*ins), want))
                for hw in (dense, sparse)]
        t_gen = best(lambda: generated(*ins), repeat)
        t_dense = best(lambda: dense(*ins), repeat)
        t_sparse = best(lambda: sparse(*ins), repeat)
    return t_gen, t_dense, t_sparse, errs


def compiled_block(spec, env, title, repeat):
    m = spec.block(title)
    run = interpreter.interpret(m, env, stand_in=True)
    _, module = build(m, env, run.params)
    ins = [torch.from_numpy(np.array(a)) for a in interpreter.random_inputs(m, env, 0)]
    with torch.no_grad():
        want = module(*ins)
        t_eager = best(lambda: module(*ins), repeat)
        try:
            t0 = time.perf_counter()
            fast = torch.compile(module)
            got = fast(*ins)
            t_first = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - the report says why
            return t_eager, None, None, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        err = max(rel_err(a.numpy(), b.numpy()) for a, b in zip(got, want)
                  if a.is_floating_point())
        t_compiled = best(lambda: fast(*ins), repeat)
    return t_eager, t_compiled, t_first, f"max rel diff {err:.1e}"


def codegen_time(spec, env, repeat):
    m = interpreter.prefix(spec.data)
    t_gen = best(lambda: codegen.generate(m, env), repeat)

    def full():
        g = codegen.generate(m, env)
        codegen.instantiate(codegen.load_module(g.source), g.class_name, torch.float64)

    return t_gen, best(full, repeat)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="medium")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--block", default="Mixing Coefficients",
                   help="block to torch.compile (default Mixing Coefficients)")
    args = p.parse_args(argv)
    spec = ncdc.load()
    env = spec.bind(args.preset).env
    print(f"preset {args.preset}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"best of {args.repeat}")

    t_interp, gen = prefix_vs_interpreter(spec, env, args.repeat)
    print("\n1. salvaged prefix (ids -> Engram of layer 1): generated eager torch vs interpreter")
    print(f"   interpreter (numpy float64)   {t_interp * 1e3:9.1f} ms")
    for dtype, (t, err) in gen.items():
        print(f"   generated torch {dtype:8s}      {t * 1e3:9.1f} ms   {t_interp / t:6.2f}x faster"
              f"   (max rel diff {err:.1e})")

    t_gen, t_dense, t_sparse, errs = layer0_vs_handwritten(spec, env, args.repeat)
    print("\n2. layer 0 (mHC attention + mHC MoE), float64: generated vs hand-written")
    print(f"   generated                     {t_gen * 1e3:9.1f} ms")
    print(f"   hand-written, dense experts   {t_dense * 1e3:9.1f} ms   generated/hand = "
          f"{t_gen / t_dense:5.2f}x   (max rel diff {errs[0]:.1e})")
    print(f"   hand-written, sparse dispatch {t_sparse * 1e3:9.1f} ms   generated/hand = "
          f"{t_gen / t_sparse:5.2f}x   (max rel diff {errs[1]:.1e})")

    t_eager, t_comp, t_first, note = compiled_block(spec, env, args.block, args.repeat)
    print(f"\n3. torch.compile of the generated {args.block!r}")
    if t_comp is None:
        print(f"   eager {t_eager * 1e3:.2f} ms; torch.compile failed: {note}")
    else:
        print(f"   eager {t_eager * 1e3:9.2f} ms   compiled {t_comp * 1e3:9.2f} ms   "
              f"speed-up {t_eager / t_comp:5.2f}x   (first call {t_first:.1f} s, {note})")

    t_g, t_full = codegen_time(spec, ncdc.load().bind("tiny").env, args.repeat)
    print("\n4. code generation, whole salvaged spec")
    print(f"   generate source {t_g:.2f} s; generate + exec + construct {t_full:.2f} s "
          "(goal <= 2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
