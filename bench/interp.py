"""Benchmark of the numpy reference interpreter; prints figures and ratios measured in one run.

1. the 32-node chain (Linear, x + x, SoftMax, RMSNorm at x=12, m=64, float64): per-node cost
   of the interpreter (its one evaluator, the compiled plan), of its plain plan (every rule,
   as under the ``on_entry``/``perturb`` hooks), ONNX's ``ReferenceEvaluator`` on the same
   graph (``pip install -e .[bench]``) and the same numpy written directly; overhead per node
   = (interpreter - numpy) / 32 (goal <= 2 us, and below ONNX);
2. per-operator overhead: one Broadcasted through the interpreter vs the direct numpy call;
3. the sliding-window read (View<win> then the score contraction of the attention core) vs a
   strided view (``sliding_window_view``) + einsum: time and tracemalloc peak;
4. layer 0 ("Sliding Window Layer", exact and emulate) and its Mixture of Experts (exact, 256
   tokens as a leading batch dim: its experts run experts first) at the ``medium`` preset,
   256 tokens: CPU and wall time, first call, tracemalloc peak;
5. the salvaged prefix of the bundled spec (ids -> Engram of layer 1) at ``tiny`` (goal <= 1 s)
   and ``medium``, exact and emulate.

Compared runs are interleaved; each figure is min / median over the rounds. By default the
script runs twice, in fresh processes, and prints one table: BLAS (OpenBLAS/OpenMP/MKL, hence
also torch's OpenMP pool were it imported) pinned to one thread in the first column, the
default thread count in the second (``--threads 1|default`` runs one of them, printing rows).

    python bench/interp.py [--quick] [--threads 1|default]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
if "--threads" in sys.argv and sys.argv[sys.argv.index("--threads") + 1:][:1] == ["1"]:
    for _var in THREAD_VARS:                      # before numpy loads its BLAS
        os.environ[_var] = "1"

import numpy as np
import sympy

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import ncdc
from ncdc import interpreter
from ncdc.ir import (
    FREE_INPUT,
    TILED,
    AdditionOp,
    Arithmetic,
    Array,
    Block,
    BlockTag,
    Broadcasted,
    Composed,
    Einops,
    Linear,
    Normalize,
    ProductOfMorphisms,
    RawAxis,
    Reals,
    Rearrangement,
    SoftMax,
    StrideMorphism,
    StrideRow,
    View,
    Weave,
)
from ncdc.ir.env import Env
from ncdc.ir.names import Name

R = Reals()
_uid = iter(range(800_000, 900_000))


def axis(label, n):
    return RawAxis(next(_uid), Name(label), sympy.Integer(n))


def w(*shape):
    return Weave(R, tuple(TILED if s == "*" else s for s in shape))


def peak(fn):
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    _, p = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return p


def operator_overhead(n_tok, width):
    x, m, o = axis("x", n_tok), axis("m", width), axis("o", width)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n_tok, width))
    W = rng.standard_normal((width, width))
    cases = {
        "Linear  (x @ W)": (
            Broadcasted(Linear(Name("W")), (w("*", m),), (w("*", o),),
                        (Rearrangement((0,), (x,)),)),
            {"W.weight": W}, lambda: X @ W),
        "Arithmetic exp": (
            Broadcasted(Arithmetic(Name("e"), formula=sympy.exp(FREE_INPUT)), (w("*", "*"),),
                        (w("*", "*"),), (Rearrangement((0, 1), (x, m)),)),
            {}, lambda: np.exp(X)),
        "Normalize (RMS)": (
            Broadcasted(Normalize(Name("n"), epsilon=sympy.Float(1e-6)), (w("*", m),),
                        (w("*", m),), (Rearrangement((0,), (x,)),)),
            {}, lambda: X / np.sqrt(np.mean(X * X, -1, keepdims=True) + 1e-6)),
        "Einops dot (x,m)->x": (
            Broadcasted(Einops(Name("e"), signature=((0,), (0,))), (w("*", m), w("*", m)),
                        (w("*"),), (Rearrangement((0,), (x,)), Rearrangement((0,), (x,)))),
            {}, lambda: np.einsum("xm,xm->x", X, X)),
    }
    rows = []
    for name, (b, params, direct) in cases.items():
        run = interpreter.interpret(b, Env(), params=params)
        args = [X] * len(b.input_weaves)
        t = interleaved({"i": lambda: run(*args), "n": direct}, number=20)  # noqa: B023
        rows.append((name, t["i"], t["n"]))
    return rows


CHAIN_EPS = 1e-6


def chain(n_tok, width, n_nodes=32):
    """A chain of ``n_nodes`` Broadcasted nodes cycling Linear, x + x, SoftMax, RMSNorm over
    ``[x, m]`` (degree x, target m), and its direct numpy twin given the weights."""
    x, m = axis("x", n_tok), axis("m", width)
    over_x = Rearrangement((0,), (x,))
    wire = Array(R, (x, m))
    items, kinds = [], []
    for i in range(n_nodes):
        kind = ("linear", "add", "softmax", "rms")[i % 4]
        kinds.append(kind)
        if kind == "linear":
            items.append(Broadcasted(Linear(Name(f"W_{i}")), (w("*", m),), (w("*", m),),
                                     (over_x,)))
        elif kind == "add":
            items.append(Rearrangement((0, 0), (wire,)))
            items.append(Broadcasted(AdditionOp(Name("+")), (w("*", m), w("*", m)),
                                     (w("*", m),), (over_x, over_x)))
        elif kind == "softmax":
            items.append(Broadcasted(SoftMax(Name("softmax")), (w("*", m),), (w("*", m),),
                                     (over_x,)))
        else:
            items.append(Broadcasted(Normalize(Name("rms"), epsilon=sympy.Float(CHAIN_EPS)),
                                     (w("*", m),), (w("*", m),), (over_x,)))
    return Composed(tuple(items)), kinds


def chain_direct(kinds, weights):
    """The chain written directly in numpy (the weights in chain order)."""
    def run(X):
        it = iter(weights)
        for kind in kinds:
            if kind == "linear":
                X = X @ next(it)
            elif kind == "add":
                X = X + X
            elif kind == "softmax":
                e = np.exp(X - X.max(-1, keepdims=True))
                X = e / e.sum(-1, keepdims=True)
            else:
                X = X / np.sqrt(np.mean(X * X, -1, keepdims=True) + CHAIN_EPS)
        return X
    return run


def chain_onnx(kinds, weights, n_tok, width):
    """The chain as an ONNX graph run by ``onnx.reference.ReferenceEvaluator`` (None when onnx
    is not installed: ``pip install -e .[bench]``)."""
    try:
        from onnx import TensorProto, helper, numpy_helper
        from onnx.reference import ReferenceEvaluator
    except ImportError:
        return None
    nodes, inits, it, cur = [], [], iter(weights), "x0"
    for i, kind in enumerate(kinds):
        out = f"x{i + 1}"
        if kind == "linear":
            inits.append(numpy_helper.from_array(next(it), f"W{i}"))
            nodes.append(helper.make_node("MatMul", [cur, f"W{i}"], [out]))
        elif kind == "add":
            nodes.append(helper.make_node("Add", [cur, cur], [out]))
        elif kind == "softmax":
            nodes.append(helper.make_node("Softmax", [cur], [out], axis=-1))
        else:
            nodes.append(helper.make_node("RMSNormalization", [cur, "gain"], [out], axis=-1,
                                          epsilon=CHAIN_EPS))
        cur = out
    if "rms" in kinds:
        inits.append(numpy_helper.from_array(np.ones(width), "gain"))
    t = TensorProto.DOUBLE
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x0", t, [n_tok, width])],
                              [helper.make_tensor_value_info(cur, t, [n_tok, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    ev = ReferenceEvaluator(model)
    return lambda X: ev.run(None, {"x0": X})[0]


def chain_bench(n_tok=12, width=64, n_nodes=32, rounds=400, number=1, clock=time.perf_counter):
    """Cost of the chain: interpreter and direct numpy interleaved call by call (many short
    rounds: on a shared machine the minimum then is a round that nothing interrupted); then
    the plain plan and ONNX's ReferenceEvaluator, interleaved with numpy again;
    returns {name: (min, median)} in seconds per call."""
    m, kinds = chain(n_tok, width, n_nodes)
    run = interpreter.interpret(m, Env())
    weights = [run.params[s.key] for s in run.param_specs]
    direct = chain_direct(kinds, weights)
    X = np.random.default_rng(2).standard_normal((n_tok, width))
    ref = direct(X)
    assert np.allclose(run(X)[0], ref, rtol=1e-10, atol=1e-12)
    res = interleaved({"interpreter": lambda: run(X), "numpy": lambda: direct(X)}, rounds,
                      number, clock)
    # the slow candidates are interleaved apart: run between the interpreter's calls they
    # evict its (Python) working set, and its minimum then is a cold call
    slow = {"numpy (beside the next ones)": lambda: direct(X)}
    plain = interpreter.interpret(m, Env(), params=dict(run.params))
    slow["interpreter, plain plan (hooks)"] = lambda: plain.evaluate(X, on_entry=_no_hook)
    onnx_run = chain_onnx(kinds, weights, n_tok, width)
    if onnx_run is not None:
        assert np.allclose(onnx_run(X), ref, rtol=1e-10, atol=1e-12)
        slow["onnx reference"] = lambda: onnx_run(X)
    res.update(interleaved(slow, max(rounds // 4, 7), number, clock))
    return res


def _no_hook(*_):
    """An ``on_entry`` that does nothing: the evaluation runs the plain plan."""


def interleaved(cands, rounds=7, number=1, clock=time.perf_counter):
    """Time each candidate ``rounds`` times, the candidates taking turns; {name: (min, median)}
    seconds per call. ``clock=time.process_time`` counts this process's CPU time only (robust
    on a shared machine when BLAS runs on this thread)."""
    times = {k: [] for k in cands}
    for fn in cands.values():
        fn()
    for _ in range(rounds):
        for k, fn in cands.items():
            t = clock()
            for _ in range(number):
                fn()
            times[k].append((clock() - t) / number)
    return {k: (min(v), float(np.median(v))) for k, v in times.items()}


def window_scores(n_tok, n_win, width):
    """Composed[View<win>, Einops dot]: s[x, j] = sum_c q[x, c] k[x - j, c]."""
    x, j, c = axis("x", n_tok), axis("w", n_win), axis("c", width)
    tag = BlockTag(next(_uid), None, sympy.Integer(1), "win")
    win = ProductOfMorphisms((Block(StrideMorphism(
        (x, j), (StrideRow(x, (sympy.Integer(1), sympy.Integer(-1)), sympy.Integer(0)),)),
        tag), Rearrangement((0,), (c,))))
    from ncdc.ir import Array

    view = Broadcasted(View(Name("win")), (w("*", "*"),), (w("*", "*", "*"),), (win,))
    dot = Broadcasted(Einops(Name("e"), signature=((0,), (0,))), (w("*", c), w("*", "*", c)),
                      (w("*", "*"),), (Rearrangement((0,), (x, j)),
                                       Rearrangement((0, 1), (x, j))))
    pair = ProductOfMorphisms((Rearrangement((0,), (Array(R, (x, c)),)), view))
    return Composed((pair, dot))


def window_bench(n_tok, n_win, width):
    m = window_scores(n_tok, n_win, width)
    run = interpreter.interpret(m, Env())
    rng = np.random.default_rng(1)
    q = rng.standard_normal((n_tok, width))
    k = rng.standard_normal((n_tok, width))

    def direct():
        kp = np.pad(k, ((n_win - 1, 0), (0, 0)))
        K = np.lib.stride_tricks.sliding_window_view(kp, n_win, axis=0)[:, :, ::-1]
        s = np.einsum("xc,xcj->xj", q, K)
        live = (np.arange(n_tok)[:, None] - np.arange(n_win)[None, :]) >= 0
        return np.where(live, s, 0.0)

    got = run(q, k)[0]
    assert np.allclose(got, direct(), rtol=1e-12, atol=1e-9)
    t = interleaved({"i": lambda: run(q, k), "n": direct}, rounds=5)
    t_i, t_n = t["i"], t["n"]
    m_i, m_n = peak(lambda: run(q, k)), peak(direct)
    full = n_tok * n_win * width * 8
    return t_i, t_n, m_i, m_n, full


def block_bench(title, preset="medium", rounds=5, batch=(), quant="exact"):
    """One block of the bundled spec at ``preset``, exact, stand-in weights, inputs with
    leading ``batch`` dims: (first call, (min, median) CPU time, (min, median) wall time of
    the following calls, tracemalloc peak of one call) in seconds / bytes."""
    spec = ncdc.load()
    env = spec.bind(preset).env
    blk = spec.block(title)
    run = interpreter.interpret(blk, env, stand_in=True, quant=quant)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(tuple(batch) + x.shape) if batch else x
          for x in interpreter.random_inputs(blk, env, 0)]
    t0 = time.perf_counter()
    out = run(*xs)
    t_first = time.perf_counter() - t0
    assert all(np.isfinite(o).all() for o in out)
    cpu, wall = [], []
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        run(*xs)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return (t_first, (min(cpu), float(np.median(cpu))), (min(wall), float(np.median(wall))),
            peak(lambda: run(*xs)))


def prefix_bench(preset, quant):
    spec = ncdc.load()
    env = spec.bind(preset).env
    pre = interpreter.prefix(spec.data)
    t0 = time.perf_counter()
    run = interpreter.interpret(pre, env, stand_in=True, quant=quant)
    ids = interpreter.random_inputs(pre, env, 0)
    t_prep = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = run(*ids)
    t_first = time.perf_counter() - t0
    t_steady = interleaved({"run": lambda: run(*ids)}, rounds=3, clock=time.process_time)["run"]
    assert all(np.isfinite(o).all() for o in out)
    return t_prep, t_first, t_steady


def us(t):
    return f"{t[0] * 1e6:.1f} / {t[1] * 1e6:.1f} us"


def ms(t):
    return f"{t[0] * 1e3:.1f} / {t[1] * 1e3:.1f} ms"


def run_bench(args, row):
    """Measure everything; ``row(section, label, text)`` records one figure."""
    n_nodes = 32
    for label, clock in (("wall", time.perf_counter), ("CPU", time.process_time)):
        sec = (f"{n_nodes}-node chain (Linear, x+x, SoftMax, RMSNorm; x=12, m=64), per node, "
               f"{label} time")
        res = chain_bench(n_nodes=n_nodes, clock=clock)
        per = {k: (a / n_nodes, b / n_nodes) for k, (a, b) in res.items()}
        for name, t in per.items():
            row(sec, name, us(t))
        for name in per:
            if name.startswith(("interpreter", "onnx")):
                base = per["numpy" if name == "interpreter" else "numpy (beside the next ones)"]
                over = (per[name][0] - base[0], per[name][1] - base[1])
                goal = " (goal <= 2 us)" if name == "interpreter" else ""
                row(sec, f"over numpy: {name}{goal}", us(over))
    sec = "per-operator overhead: interpreter / direct numpy (ratio of minima)"
    for n_tok, width in ((12, 64), (256, 512)):
        for name, t_i, t_n in operator_overhead(n_tok, width):
            row(sec, f"{name} x={n_tok} m={width}",
                f"{us(t_i)} vs {us(t_n)} ({t_i[0] / t_n[0]:.1f}x)")
    sec = "sliding-window read + scores: interpreter vs sliding_window_view + einsum"
    sizes = ((512, 64, 128),) if args.quick else ((512, 64, 128), (2048, 128, 512))
    for n_tok, n_win, width in sizes:
        t_i, t_n, m_i, m_n, full = window_bench(n_tok, n_win, width)
        row(sec, f"x={n_tok} w={n_win} c={width}: time", f"{ms(t_i)} vs {ms(t_n)}")
        row(sec, f"x={n_tok} w={n_win} c={width}: peak (materialised window "
                 f"{full / 2**20:.0f} MiB)", f"{m_i / 2**20:.1f} vs {m_n / 2**20:.1f} MiB")
    if not args.quick:
        sec = "medium preset, 256 tokens (CPU time, wall time; tracemalloc peak of one call)"
        blocks = [("Sliding Window Layer", (), "exact"), ("Sliding Window Layer", (), "emulate"),
                  ("Mixture of Experts", (256,), "exact")]   # leading batch dims: 256 tokens
        for title, batch, quant in blocks:
            t_first, cpu, wall, mem = block_bench(title, batch=batch, quant=quant)
            row(sec, f"{title} {quant}", f"{ms(cpu)}, wall {ms(wall)}, first "
                                         f"{t_first * 1e3:.0f} ms, {mem / 2**20:.1f} MiB")
    sec = "salvaged prefix (ids -> Engram of layer 1), CPU time"
    presets = ("tiny",) if args.quick else ("tiny", "medium")
    for preset in presets:
        for quant in ("exact", "emulate"):
            t_prep, t_first, t_steady = prefix_bench(preset, quant)
            goal = " (goal <= 1 s)" if preset == "tiny" else ""
            row(sec, f"{preset} {quant}{goal}", f"{ms(t_steady)}, prepare "
                                                f"{t_prep * 1e3:.0f} ms, first {t_first * 1e3:.0f} ms")


def _table(columns: dict[str, list]) -> None:
    """The rows of each thread setting side by side, by section."""
    names = list(columns)
    first = columns[names[0]]
    cells = {name: {(sec, label): text for sec, label, text in rows}
             for name, rows in columns.items()}
    width = max(len(label) for _s, label, _t in first) + 2
    col = max(len(t) for rows in columns.values() for _s, _l, t in rows) + 2
    sec_now = None
    for sec, label, _t in first:
        if sec != sec_now:
            sec_now = sec
            print(f"== {sec}")
            print(f"  {'':{width}s}" + "".join(f"{n:{col}s}" for n in names))
        print(f"  {label:{width}s}" + "".join(f"{cells[n].get((sec, label), '-'):{col}s}"
                                              for n in names))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, no medium preset")
    ap.add_argument("--threads", choices=("1", "default"),
                    help="run once with BLAS at this thread count (default: both, in turn)")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads:
        rows = []
        run_bench(args, lambda *r: rows.append(r) if args.json else print(" | ".join(r)))
        if args.json:
            print(json.dumps(rows))
        return
    columns = {}
    for threads in ("1", "default"):
        env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
        cmd = [sys.executable, os.path.abspath(__file__), "--threads", threads, "--json"]
        out = subprocess.run(cmd + (["--quick"] if args.quick else []), env=env, check=True,
                             capture_output=True, text=True).stdout
        label = "1 thread" if threads == "1" else f"default ({os.cpu_count()} CPUs)"
        columns[label] = json.loads(out.strip().splitlines()[-1])
    print("figures: min / median over interleaved rounds")
    _table(columns)


if __name__ == "__main__":
    main()
