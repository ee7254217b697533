"""Benchmark of the PyTorch code generator (ratios measured in one run).

Torch is pinned to one thread; where a figure depends on threads it is measured again at the
default thread count (second column). Compared runs are interleaved (one call of each in turn,
``--repeat`` rounds after a warm-up) and the minimum and median of each are printed.

1. generated layer 0 against the hand-written layer 0 of ``bench/handwritten_layer0.py`` on
   the same weights, float32 and float64 (goal: <= 1.1x; the two are first checked to agree);
2. generated layer 0 in bfloat16 against float32;
3. ``torch.compile(fullgraph=True)`` of the generated layer 0 (``static_shapes=True``) against
   eager, float32 (goal: >= 2x), plain and with inductor's ``freezing`` (``COMPILE_FORMS``),
   and the compile times; raced with them, the matrix products of one eager forward replayed
   alone (the floor of any compiled form that keeps those products);
4. peak memory of a forward of the generated Sliding Window Attention at 2048 tokens for
   w = 16, 64, 128 (goal: independent of w within 10%), from the profiler's allocation events,
   chunked and not, and the submodule that holds the peak;
5. generated eager torch against the reference interpreter, whole salvaged prefix (goal: >= 20x);
6. code generation time for the whole salvaged spec (goal: <= 2 s).

Run with ``python bench/codegen.py [--preset medium] [--repeat 7] [--skip compile,...]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# this file is named like the package it measures: keep bench/ off the import path
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]

import ncdc
from ncdc import codegen, interpreter
from ncdc.verify.check import run_generated

DEFAULT_THREADS = torch.get_num_threads()
SECTIONS = ("handwritten", "bfloat16", "compile", "memory", "interpreter", "codegen")


def _load(path):
    """The Python file at ``path`` (relative to this folder) as a module."""
    import importlib.util

    full = os.path.normpath(os.path.join(HERE, path))
    spec = importlib.util.spec_from_file_location(os.path.basename(full)[:-3], full)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _handwritten():
    return _load("handwritten_layer0.py")


def peak_forward_bytes(module, args) -> int:
    """Peak of one forward's allocations (inputs and weights not counted), measured by the
    helper the memory tests use (``tests/profiling.py``)."""
    return _load("../tests/profiling.py").peak_forward_bytes(module, args)


def race(fns: dict, repeat: int) -> dict:
    """Seconds per call of each function: one warm-up call each, then ``repeat`` rounds that
    call every function once, in turn."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def both_threads(fns: dict, repeat: int) -> tuple[dict, dict]:
    """``race`` at one thread, then at the default thread count."""
    out = []
    for n in (1, DEFAULT_THREADS):
        torch.set_num_threads(n)
        out.append(race(fns, repeat))
    torch.set_num_threads(1)
    return out[0], out[1]


def ms(ts) -> str:
    """``min / median`` in milliseconds."""
    return f"{min(ts) * 1e3:8.2f} / {statistics.median(ts) * 1e3:8.2f} ms"


def ratio(a, b) -> str:
    """``a / b`` of the minima and of the medians."""
    return f"{min(a) / min(b):5.2f}x / {statistics.median(a) / statistics.median(b):5.2f}x"


def build(morphism, env, params, dtype="float64", **kwargs):
    g = codegen.generate(morphism, env, runtime={"loader"})
    mod = codegen.load_module(g.source)
    if not g.root.needs_static:
        kwargs.pop("static_shapes", None)
    module = codegen.instantiate(mod, g.class_name, codegen.DTYPES[dtype], **kwargs)
    g.load_params(module, params)
    return g, module


def rel_err(got, want) -> float:
    got = np.asarray(got.detach().double() if isinstance(got, torch.Tensor) else got)
    want = np.asarray(want.detach().double() if isinstance(want, torch.Tensor) else want)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300))


def _outputs(out):
    return out if isinstance(out, tuple) else (out,)


class Layer0:
    """Layer 0 at one preset: the interpreter's weights and inputs, generated modules."""

    def __init__(self, spec, env):
        self.spec, self.env = spec, env
        self.block = spec.block("Sliding Window Layer")
        self.run = interpreter.interpret(self.block, env, stand_in=True)
        self.inputs = [torch.from_numpy(np.array(a))
                       for a in interpreter.random_inputs(self.block, env, 0)]

    def args(self, dtype):
        return [a.to(codegen.DTYPES[dtype]) if a.is_floating_point() else a for a in self.inputs]

    def generated(self, dtype, **kwargs):
        return build(self.block, self.env, self.run.params, dtype, **kwargs)[1]

    def handwritten(self, dtype, sparse):
        layer = _handwritten().Layer0
        symbols = {}
        for s in self.spec.symbols.values():
            symbols.setdefault(s.label, s)
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            hw = layer.from_env(self.env, symbols, sparse_experts=sparse)
            hw.load_interpreter_params(self.run.params)
        finally:
            torch.set_default_dtype(old)
        return hw.to(codegen.DTYPES[dtype])


def section_handwritten(l0: Layer0, repeat: int) -> None:
    print("\n1. layer 0 (mHC attention + mHC MoE): generated vs hand-written, same weights "
          f"(goal <= 1.1x); min / median, 1 thread | {DEFAULT_THREADS} threads")
    for dtype in ("float32", "float64"):
        gen = l0.generated(dtype)
        dense = l0.handwritten(dtype, sparse=False)
        sparse = l0.handwritten(dtype, sparse=True)
        args = l0.args(dtype)
        with torch.no_grad():
            want = _outputs(gen(*args))
            errs = [max(rel_err(a, b) for a, b in zip(_outputs(hw(*args)), want, strict=True))
                    for hw in (dense, sparse)]
            one, many = both_threads({name: (lambda f=f, a=args: f(*a)) for name, f in
                                      (("generated", gen), ("dense", dense),
                                       ("sparse", sparse))}, repeat)
        print(f"   {dtype}: generated                  {ms(one['generated'])} | "
              f"{ms(many['generated'])}")
        for name, err in zip(("dense", "sparse"), errs, strict=True):
            label = f"hand-written, {name} experts"
            print(f"   {dtype}: {label:26s} {ms(one[name])} | {ms(many[name])}   "
                  f"generated/hand {ratio(one['generated'], one[name])} | "
                  f"{ratio(many['generated'], many[name])}   (max rel diff {err:.1e})")


def section_bfloat16(l0: Layer0, repeat: int) -> None:
    print("\n2. layer 0, generated: bfloat16 vs float32; min / median, 1 thread | "
          f"{DEFAULT_THREADS} threads")
    f32 = l0.generated("float32")
    a32 = l0.args("float32")
    try:
        b16 = l0.generated("float32").to(torch.bfloat16)
        a16 = l0.args("bfloat16")
        with torch.no_grad():
            got = _outputs(b16(*a16))
            err = max(rel_err(a.float(), b) for a, b in zip(got, _outputs(f32(*a32)), strict=True))
    except Exception as exc:  # noqa: BLE001 - the report says why
        print(f"   bfloat16 fails: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        return
    with torch.no_grad():
        one, many = both_threads({"bf16": lambda: b16(*a16), "f32": lambda: f32(*a32)}, repeat)
    print(f"   float32  {ms(one['f32'])} | {ms(many['f32'])}")
    print(f"   bfloat16 {ms(one['bf16'])} | {ms(many['bf16'])}   bf16/f32 "
          f"{ratio(one['bf16'], one['f32'])} | {ratio(many['bf16'], many['f32'])}   "
          f"(max rel diff to float32 {err:.1e})")


COMPILE_FORMS = {
    "torch.compile": {},
    "with freezing": {"freezing": True},
}
"""The compiled forms section 3 races against eager: inductor settings patched while each one
compiles (its first call). ``freezing`` folds the weights in as constants (inference only, under
``torch.no_grad``; docs/generated-modules.md, compile and export)."""


def section_compile(l0: Layer0, repeat: int) -> None:
    print("\n3. torch.compile(fullgraph=True) of the generated layer 0, float32, "
          f"static_shapes=True (goal >= 2x); min / median, 1 thread | {DEFAULT_THREADS} threads")
    eager = l0.generated("float32", static_shapes=True)
    args = l0.args("float32")
    share, others = eager_profile(eager, args)
    print(f"   profiler: matrix products (mm, bmm, addmm, also inside ncdc::grouped_matmul) are "
          f"{share:.0%} of eager self time; costliest other ops: "
          + ", ".join(f"{k} {v:.0%}" for v, k in others))
    products = RecordedProducts(eager, args)
    import torch._inductor.config

    torch._inductor.config.force_disable_caches = True  # a cold compile time
    torch._dynamo.reset()
    fns = {"eager": lambda: eager(*args), "products": products}
    with torch.no_grad():
        ex = torch._dynamo.explain(eager)(*args)
        print(f"   dynamo: {ex.graph_count} graph(s), {ex.graph_break_count} break(s)")
        want = _outputs(eager(*args))
        notes = {}
        torch._dynamo.reset()
        for name, settings in COMPILE_FORMS.items():
            # a module of its own (its own class and code objects), so each form has its own
            # graph: dynamo caches graphs on code objects and does not guard on inductor settings
            fresh = l0.generated("float32", static_shapes=True)
            try:
                with torch._inductor.config.patch(settings):
                    fast = torch.compile(fresh, fullgraph=True)
                    t0 = time.perf_counter()
                    got = _outputs(fast(*args))
                    t_compile = time.perf_counter() - t0
            except Exception as exc:  # noqa: BLE001 - the report says why
                print(f"   {name} fails: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:120]}")
                continue
            err = max(rel_err(a, b) for a, b in zip(got, want, strict=True) if a.is_floating_point())
            notes[name] = f"compile time (first call, caches off) {t_compile:.1f} s; " \
                          f"max rel diff {err:.1e}"
            fns[name] = lambda f=fast: f(*args)
        one, many = both_threads(fns, repeat)
    print(f"   eager    {ms(one['eager'])} | {ms(many['eager'])}")
    print(f"   its {products.count} matrix products alone, replayed: {ms(one['products'])} | "
          f"{ms(many['products'])}   eager/products {ratio(one['eager'], one['products'])} | "
          f"{ratio(many['eager'], many['products'])} (the most a compiled form that keeps "
          "these products can gain)")
    for name, note in notes.items():
        print(f"   {name}: {ms(one[name])} | {ms(many[name])}   speed-up "
              f"{ratio(one['eager'], one[name])} | {ratio(many['eager'], many[name])}")
        print(f"      {note}")


MATMULS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")


class RecordedProducts:
    """The matrix products one eager forward of ``module`` calls (aten ``mm``, ``bmm``,
    ``addmm``, ``baddbmm``, ``_grouped_mm`` and ``ncdc::grouped_matmul`` whole), recorded with
    their very operands (same values, same strides) by a dispatch mode; calling the object
    replays them in order and nothing else."""

    def __init__(self, module, args):
        from torch.utils._python_dispatch import TorchDispatchMode

        aten = torch.ops.aten
        ops = {aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default,
               aten._grouped_mm.default}
        if hasattr(torch.ops, "ncdc") and hasattr(torch.ops.ncdc, "grouped_matmul"):
            ops.add(torch.ops.ncdc.grouped_matmul.default)
        calls = self.calls = []

        class Record(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func in ops:  # the op runs with this mode off: inner products are not seen
                    calls.append((func, args, kwargs or {}))
                return func(*args, **(kwargs or {}))

        with torch.no_grad(), Record():
            module(*args)
        self.count = len(calls)

    def __call__(self):
        for func, args, kwargs in self.calls:
            func(*args, **kwargs)


def eager_profile(module, args, calls: int = 3) -> tuple[float, list]:
    """(share of a forward's CPU time in matrix products, the five costliest other ops with
    their shares), from the profiler's self times over ``calls`` forwards after one warm-up."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        module(*args)
        with profile(activities=[ProfilerActivity.CPU]) as p:
            for _ in range(calls):
                module(*args)
    events = p.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    if not total:
        return 0.0, []
    mat = sum(e.self_cpu_time_total for e in events if e.key in MATMULS)
    others = sorted(((e.self_cpu_time_total / total, e.key) for e in events
                     if e.key not in MATMULS), reverse=True)[:5]
    return mat / total, others


def _peak_site(module, args) -> str:
    """The submodule whose forward holds the peak of one forward's allocations."""
    from torch.profiler import ProfilerActivity, profile, record_function

    hooks, open_ = [], {}
    for name, sub in module.named_modules():
        def pre(_, __, name=name):
            open_[name] = record_function(f"module {name or 'forward'}")
            open_[name].__enter__()

        def post(_, __, ___, name=name):
            open_.pop(name).__exit__(None, None, None)

        hooks += [sub.register_forward_pre_hook(pre), sub.register_forward_hook(post)]
    try:
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU],
                                      profile_memory=True) as p:
            module(*args)
    finally:
        for h in hooks:
            h.remove()
    events = list(p.profiler.kineto_results.events())
    cur = peak = at = 0
    for t, n in sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"):
        cur += n
        if cur > peak:
            peak, at = cur, t
    spans = [(e.start_ns(), e.name()[len("module "):]) for e in events
             if e.name().startswith("module ")
             and e.start_ns() <= at <= e.start_ns() + e.duration_ns()]
    return max(spans)[1] if spans else "?"


def section_memory(spec, preset: str, tokens: int = 2048) -> None:
    print(f"\n4. peak memory of a forward of the generated Sliding Window Attention, {tokens} "
          "tokens, float64 (goal: independent of w within 10%); peak of the running sum of the "
          "profiler's allocation events (inputs and weights not counted); the Attention Core "
          "runs over chunks of tokens (prelude chunks, CHUNK_BYTES budget)")
    block = spec.block("Sliding Window Attention")
    peaks, scores = {}, {}

    def size(label, env):
        return env.size(next(s for s in spec.symbols.values() if s.label == label))

    for w in (16, 64, 128):
        env = spec.bind(preset, sizes={"w": w}).env
        run = interpreter.interpret(block, env, stand_in=True)
        _, module = build(block, env, run.params, "float64")
        ns = sys.modules[type(module).__module__]
        m = env.size(block.dom[0].shape[-1].size)
        x = torch.randn(tokens, m, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        scores[w] = size("h", env) * tokens * w * x.element_size()
        budget = ns.CHUNK_BYTES
        ns.CHUNK_BYTES = 1 << 50
        unchunked = peak_forward_bytes(module, [x])
        ns.CHUNK_BYTES = budget
        peaks[w] = peak_forward_bytes(module, [x])
        print(f"   w = {w:3d}: peak {peaks[w] / 2**20:7.1f} MiB (unchunked {unchunked / 2**20:6.1f}"
              f" MiB), held in {_peak_site(module, [x])}; one [h, x, w] score array "
              f"{scores[w] / 2**20:5.1f} MiB")
    def run(limit):
        ns.CHUNK_BYTES = limit
        with torch.no_grad():
            module(x)

    one, default = both_threads({"chunked": lambda: run(budget),
                                 "unchunked": lambda: run(1 << 50)}, 5)
    ns.CHUNK_BYTES = budget
    for label, t in (("1 thread", one), (f"{DEFAULT_THREADS} threads", default)):
        print(f"   time at w = 128, {label}: chunked {ms(t['chunked'])}, unchunked "
              f"{ms(t['unchunked'])}: {ratio(t['chunked'], t['unchunked'])}")
    grown = (peaks[128] - peaks[16]) / (scores[128] - scores[16])
    print(f"   w = 128 over w = 16: {peaks[128] / peaks[16]:.2f}x; the growth is {grown:.2f} "
          "score arrays' worth")


def section_interpreter(spec, env, repeat: int) -> None:
    m = interpreter.prefix(spec.data)
    run = interpreter.interpret(m, env, stand_in=True)
    ins = interpreter.random_inputs(m, env, 0)
    tape = interpreter.random_tape(m, env, 0)
    ref = run.evaluate(*ins, tape=tape).outputs
    fns = {"interpreter": lambda: run.evaluate(*ins, tape=tape)}
    errs = {}
    for dtype in ("float64", "float32"):
        g, module = build(m, env, run.params, dtype)
        got = run_generated(g, module, ins, tape, dtype)
        errs[dtype] = max(rel_err(v, r.values) for (v, _), r in zip(got, ref, strict=True))
        fns[dtype] = lambda g=g, module=module, dtype=dtype: run_generated(g, module, ins, tape,
                                                                          dtype)
    times = race(fns, max(2, repeat // 2))
    print("\n5. salvaged prefix (ids -> Engram of layer 1): generated eager torch vs interpreter "
          "(goal >= 20x), 1 thread")
    print(f"   interpreter (numpy float64)  {ms(times['interpreter'])}")
    for dtype in ("float64", "float32"):
        print(f"   generated torch {dtype:8s}     {ms(times[dtype])}   faster "
              f"{ratio(times['interpreter'], times[dtype])}   (max rel diff {errs[dtype]:.1e})")


def section_codegen(spec, repeat: int) -> None:
    env = spec.bind("tiny").env
    m = interpreter.prefix(spec.data)

    def full():
        g = codegen.generate(m, env)
        codegen.instantiate(codegen.load_module(g.source), g.class_name, torch.float64)

    times = race({"generate": lambda: codegen.generate(m, env), "full": full},
                 max(2, repeat // 2))
    print("\n6. code generation, whole salvaged spec (goal <= 2 s)")
    print(f"   generate source {min(times['generate']):.2f} s; generate + exec + construct "
          f"{min(times['full']):.2f} s (min)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="medium")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--skip", default="", help="comma-separated sections to skip: "
                   + ", ".join(SECTIONS))
    args = p.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    torch.set_num_threads(1)
    spec = ncdc.load()
    env = spec.bind(args.preset).env
    print(f"preset {args.preset}, torch {torch.__version__}, 1 thread | {DEFAULT_THREADS} "
          f"threads (default), {args.repeat} interleaved rounds")
    l0 = None if {"handwritten", "bfloat16", "compile"} <= skip else Layer0(spec, env)
    if "handwritten" not in skip:
        section_handwritten(l0, args.repeat)
    if "bfloat16" not in skip:
        section_bfloat16(l0, args.repeat)
    if "compile" not in skip:
        section_compile(l0, args.repeat)
    if "memory" not in skip:
        section_memory(spec, args.preset)
    if "interpreter" not in skip:
        section_interpreter(spec, env, args.repeat)
    if "codegen" not in skip:
        section_codegen(spec, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
