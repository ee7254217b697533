"""Whole-graph ``torch.compile`` and ``torch.export`` of generated modules (issue 9 point 5,
issue 10 point 5): with ``static_shapes=True`` the routed experts take a static-shape path (k
pairs per row, the grouped product as the custom op ``ncdc::grouped_matmul``), so a block
traces as one graph; the exported program, run again, agrees with the interpreter.

Compiling is slow on small machines: CI exports a representative set (Mixing Coefficients,
Attention Core, the MoE, layer 0 with a dynamic token count), counts graph breaks of layer 0 and compiles two blocks with
``fullgraph=True`` (Attention Core, the MoE). ``NCDC_SLOW_TESTS=1`` adds export and compile of every block of the
bundled spec.

Also here: the static grouped product's kernel (one ``torch._grouped_mm`` where its stride rules
allow) against per-pair products; the rotary embeddings on real parts (no complex tensor,
bit-identical to the complex form); the compile form for inference of docs/generated-modules.md
(inductor's ``freezing``) against eager and the interpreter."""
from __future__ import annotations

import importlib.util
import time

import numpy as np
import pytest

from ncdc import codegen, interpreter
from ncdc.verify.check import CheckResult, compare, run_generated
from tests.conftest import exhaustive
from tests.lazy import torch


def _prelude():
    """codegen/prelude/pairs.py as a module (it is pasted verbatim into generated files)."""
    path = importlib.util.find_spec("ncdc.codegen").submodule_search_locations[0] + \
        "/prelude/pairs.py"
    spec = importlib.util.spec_from_file_location("pairs_prelude_static", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_static_pairs_against_loops():
    """The static form: exactly k pairs per row (its live slots, then dead pairs at slot 0),
    grouped by slot, each group in row order; the grouped product, the row sums and the dense layout against plain
    loops; a dead pair's NaN reaches neither the sums nor the dense layout."""
    p = _prelude()
    gen = torch.Generator().manual_seed(1)
    lead, n, k, f, o = (2, 3), 6, 3, 4, 5
    live = torch.rand(*lead, n, generator=gen) < 0.5
    live[0, 0] = False  # a row without pairs
    live[1, 2, :] = False
    live[1, 2, 4] = True  # a row with one live slot
    rows, slots, pair_live = p.live_pairs(live, lead, k, static=True)
    flat = live.reshape(-1, n).numpy()
    want_rows, want_slots, want_live = [], [], []
    for r in range(flat.shape[0]):
        picked = [s for s in range(n) if flat[r, s]][:k]
        for j in range(k):
            want_rows.append(r)
            want_slots.append(picked[j] if j < len(picked) else 0)
            want_live.append(j < len(picked))
    by_slot = sorted(range(len(want_slots)), key=want_slots.__getitem__)  # stable: row order
    want_rows, want_slots, want_live = ([want[i] for i in by_slot] for want in
                                        (want_rows, want_slots, want_live))
    assert rows.tolist() == want_rows and slots.tolist() == want_slots
    assert pair_live.tolist() == want_live
    pairs = (rows, slots, pair_live)
    x = torch.randn(*lead, f, generator=gen, dtype=torch.float64)
    w = torch.randn(f, n, o, generator=gen, dtype=torch.float64)
    got = p.pairwise_matmul(p.take_rows(x, 1, lead, pairs), w, 1, pairs).numpy()
    xf, wn = x.reshape(-1, f).numpy(), w.numpy()
    np.testing.assert_allclose(got, np.stack([xf[r] @ wn[:, s] for r, s in
                                              zip(want_rows, want_slots, strict=True)]), rtol=1e-13)
    v = torch.randn(len(want_rows), o, generator=gen, dtype=torch.float64)
    v[~pair_live] = float("nan")
    summed = np.zeros((flat.shape[0], o))
    dense = np.zeros((flat.shape[0], n, o))
    for i, (r, s, ok) in enumerate(zip(want_rows, want_slots, want_live, strict=True)):
        if ok:
            summed[r] += v[i].numpy()
            dense[r, s] = v[i].numpy()
    np.testing.assert_allclose(p.add_rows(v, lead, pairs).numpy(), summed.reshape(*lead, o),
                               rtol=1e-13)
    assert np.array_equal(p.pairs_to_dense(v, lead, n, pairs).numpy(),
                          dense.reshape(*lead, n, o))
    more = p.live_pairs(live, lead, n + 2, static=True)  # more slots than the axis has
    assert more[0].shape == (6 * (n + 2),) and int(more[2].sum()) == int(live.sum())


@pytest.mark.slow
def test_grouped_matmul_op_gradients_and_registration():
    """``ncdc::grouped_matmul``: gradients against finite differences (float64), and
    ``torch.library.opcheck`` (schema, fake kernel, autograd registration)."""
    p = _prelude()
    gen = torch.Generator().manual_seed(2)
    rows = torch.randn(7, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = torch.randn(3, 4, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    slots = torch.tensor([0, 0, 1, 2, 2, 2, 3])  # grouped by slot, as live_pairs makes them
    assert torch.autograd.gradcheck(lambda r, w: p.grouped_matmul(r, w, 1, slots),
                                    (rows, weight))
    torch.library.opcheck(p.grouped_matmul, (rows, weight, 1, slots))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("shape", [(40, 16, 8, 4), (9, 3, 5, 4)])
def test_grouped_products_against_per_pair_products(dtype, shape, monkeypatch):
    """The op's kernel: one ``torch._grouped_mm`` over the pairs grouped by slot where its
    stride rules allow (float32/bfloat16, 16-byte strides) and half the slots are busy, else
    one product per busy slot; both give every pair's own product (against a loop over pairs,
    in float64), and the grouped kernel the per-slot products bit for bit."""
    dtype = getattr(torch, dtype)
    p = _prelude()
    pairs, inner, out, n = shape
    gen = torch.Generator().manual_seed(3)
    rows = torch.randn(pairs, inner, generator=gen, dtype=torch.float64).to(dtype)
    weight = torch.randn(inner, n, out, generator=gen, dtype=torch.float64).to(dtype)
    slots = torch.randint(0, n, (pairs,), generator=gen)
    slots[:3] = 0  # a slot with several pairs; others may have none
    slots = slots.sort().values
    calls = []
    real = torch._grouped_mm
    monkeypatch.setattr(torch, "_grouped_mm", lambda *a, **k: calls.append(1) or real(*a, **k))
    counts = torch.bincount(slots, minlength=n).tolist()
    got = p._products(rows, weight, 1, counts)
    grouped = (dtype != torch.float64 and inner * rows.element_size() % 16 == 0
               and 2 * sum(map(bool, counts)) >= n)
    assert bool(calls) == grouped
    r64, w64 = rows.double().numpy(), weight.double().numpy()
    want = np.stack([r64[i] @ w64[:, s] for i, s in enumerate(slots.tolist())])
    tol = {torch.float64: 1e-13, torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]
    np.testing.assert_allclose(got.double().numpy(), want, rtol=tol, atol=tol * np.abs(want).max())
    starts = np.cumsum([0, *counts])
    per_slot = [rows[starts[s]:starts[s + 1]] @ weight[:, s] for s in range(n) if counts[s]]
    assert torch.equal(got, torch.cat(per_slot))
    assert torch.equal(got, p.grouped_matmul(rows, weight, 1, slots))  # the op's kernel


ROTARY = ["Rotary Embedding", "Inverse Rotary Embedding"]


def _rotary_modules(spec, title, quant, dtype, monkeypatch):
    """The block generated with complex values as real parts and, forced off, as complex
    tensors; both on the interpreter's weights."""
    from ncdc.codegen import complex_parts

    m = spec.block(title)
    env = spec.bind("tiny").env
    out = []
    for parts in (True, False):
        if not parts:
            monkeypatch.setattr(complex_parts, "eligible", lambda *a, **k: False)
        g = codegen.generate(m, env, quant=quant, runtime={"loader"})
        out.append((g, codegen.instantiate(codegen.load_module(g.source), g.class_name,
                                           codegen.DTYPES[dtype])))
    monkeypatch.undo()
    return m, env, out


@pytest.mark.parametrize("title", ROTARY)
def test_rotary_as_real_parts_holds_no_complex_value(bundled, title, monkeypatch):
    """The rotary embeddings hold their complex values as real parts: no op of a forward makes
    a complex tensor (the complex form, forced, does); a block whose complex values leave it
    keeps complex tensors."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Dtypes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    self.seen.add(t.dtype)
            return out

    m, env, [(g, parts), (g_c, complex_form)] = _rotary_modules(bundled, title, "exact",
                                                               "float32", monkeypatch)
    x = _tensor(interpreter.random_inputs(m, env, 0)[0], "float32")
    seen = []
    for module in (parts, complex_form):
        with torch.no_grad(), Dtypes() as mode:
            module(x)
        seen.append({dt for dt in mode.seen if dt.is_complex})
    assert not seen[0] and torch.complex64 in seen[1]
    body, body_c = _class_source(g), _class_source(g_c)
    assert "torch.polar" not in body and "torch.complex(" not in body and "_cos" in body
    assert "torch.polar" in body_c
    assert "torch.complex(" in _class_source(codegen.generate(
        bundled.block("Inverse Rotary Embedding / Pairs as Complex Numbers"), env))


def _class_source(g) -> str:
    """The generated classes (the preludes left out)."""
    return g.source[g.source.index("\nclass Module("):]


@pytest.mark.parametrize("title", ROTARY)
@pytest.mark.parametrize("quant", ["exact", "emulate"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_rotary_real_parts_match_the_complex_form(bundled, title, quant, dtype, monkeypatch):
    """Real parts round where the complex form rounds: the same values bit for bit, in every
    dtype and in emulate mode; in float64 both agree with the interpreter to 1e-15."""
    m, env, [(_, parts), (_, complex_form)] = _rotary_modules(bundled, title, quant, dtype,
                                                            monkeypatch)
    ins = interpreter.random_inputs(m, env, 0)
    x = _tensor(ins[0], dtype)
    with torch.no_grad():
        got, want = parts(x), complex_form(x)
    assert got.dtype == want.dtype and torch.equal(got, want)
    if dtype == "float64":
        ref = interpreter.interpret(m, env, quant=quant)(*ins)[0]
        np.testing.assert_allclose(got.numpy(), ref, rtol=0, atol=1e-15 * np.abs(ref).max())


def _routed_params(run, e):
    """Routing pinned to experts 0-5 of ``e``; the idle experts' weights NaN."""
    params = {key: np.array(v, copy=True) for key, v in run.params.items()}
    bias = np.full(e, -1e3)
    bias[:6] = 4.0
    params["Mixture of Experts/Expert Gate/bias.weight"] = bias
    for name in ("W^{G}", "W^{U}", "W^{D}"):
        key = f"Mixture of Experts/Routed Experts/{name}.weight"
        params[key][:, 6:] = np.nan
    return params


def test_static_moe_agrees_with_sparse_dispatch_and_the_interpreter(bundled):
    """The MoE with ``static_shapes=True`` equals the sparse default and the interpreter, token
    by token, and never multiplies an idle expert (their NaN weights change nothing)."""
    moe = bundled.block("Mixture of Experts")
    env = bundled.bind("tiny", sizes={"e": 16, "k": 4}).env
    base = interpreter.interpret(moe, env, stand_in=True, seed=0)
    params = _routed_params(base, 16)
    run = interpreter.interpret(moe, env, params=params)
    tokens = np.stack([interpreter.random_inputs(moe, env, s)[0] for s in range(12)])
    g = codegen.generate(moe, env, runtime={"loader"})
    mod = codegen.load_module(g.source)
    assert g.root.needs_static and "static_shapes=False" in g.source
    outs = []
    for static in (False, True):
        module = codegen.instantiate(mod, g.class_name, torch.float64, static_shapes=static)
        g.load_params(module, params)
        ((got, live),) = run_generated(g, module, [tokens], {}, "float64")
        assert live is None and not torch.isnan(got).any()
        outs.append(got)
    np.testing.assert_allclose(outs[1].numpy(), outs[0].numpy(), rtol=1e-13, atol=1e-15)
    for i, x in enumerate(tokens):
        res = CheckResult("moe", "", "")
        compare(run.evaluate(x).outputs, [(outs[1][i], None)], "exact", "float64", res, moe.cod)
        assert res.ok, f"token {i}: {res.problem}"


def _setup(spec, m, preset="tiny", dtype="float64", seed=0):
    env = spec.bind(preset).env
    run = interpreter.interpret(m, env, stand_in=True, seed=seed)
    ins = interpreter.random_inputs(m, env, seed)
    tape = interpreter.random_tape(m, env, seed)
    ref = run.evaluate(*ins, tape=tape).outputs
    g = codegen.generate(m, env, runtime={"loader"})
    kwargs = {"static_shapes": True} if g.root.needs_static else {}
    module = codegen.instantiate(codegen.load_module(g.source), g.class_name,
                                 codegen.DTYPES[dtype], **kwargs)
    g.load_params(module, run.params)
    args = [_tensor(a, dtype) for a in ins]
    return g, module, ins, tape, ref, args


def _tensor(a, dtype):
    t = torch.from_numpy(np.array(a))
    return t.to(codegen.DTYPES[dtype]) if t.is_floating_point() else t


def _export(g, module, args, tape, dtype="float64"):
    """``torch.export.export`` of ``module`` on ``args`` (and the tape, for a block that
    reads it)."""
    kwargs = {}
    if g.root.uses_tape:
        kwargs["tape"] = {g.slot_keys[uid]: _tensor(v, dtype) for uid, v in tape.items()
                          if uid in g.slot_keys}
    with torch.no_grad():
        return torch.export.export(module, tuple(args), kwargs)


def _agrees(g, m, module, ins, tape, ref, dtype="float64"):
    res = CheckResult(getattr(m, "title", "") or "", "", "")
    compare(ref, run_generated(g, module, ins, tape, dtype), "exact", dtype, res, m.cod)
    return res


REPRESENTATIVE = ["Mixing Coefficients", "Attention Core", "Mixture of Experts"]


@pytest.mark.slow
@pytest.mark.parametrize("title", REPRESENTATIVE)
def test_exported_program_agrees_with_the_interpreter(bundled, title):
    """``torch.export.export`` succeeds and the exported program, run again, agrees with the
    interpreter (float64, relative 1e-10)."""
    m = bundled.block(title)
    g, module, ins, tape, ref, args = _setup(bundled, m)
    ep = _export(g, module, args, tape)
    res = _agrees(g, m, ep.module(), ins, tape, ref)
    assert res.ok, res.problem
    assert res.max_rel < 1e-12


@pytest.mark.slow
def test_layer0_exports_with_a_dynamic_token_count(bundled):
    """Layer 0 exported once with the token count dynamic (at least one window): the program
    agrees with the interpreter at the exported length and with eager at two others."""
    m = bundled.block("Sliding Window Layer")
    g, module, ins, tape, ref, args = _setup(bundled, m)
    w = bundled.bind("tiny").env.size(next(s for s in bundled.symbols.values()
                                           if s.label == "w"))
    tokens = torch.export.Dim("tokens", min=w, max=4096)
    with torch.no_grad():
        ep = torch.export.export(module, tuple(args),
                                 dynamic_shapes=tuple({0: tokens} for _ in args))
    res = _agrees(g, m, ep.module(), ins, tape, ref)
    assert res.ok, res.problem
    for n in (w, 3 * args[0].shape[0] + 1):
        longer = [torch.cat([a] * 4)[:n] for a in args]
        with torch.no_grad():
            got, want = ep.module()(*longer), module(*longer)
        for a, b in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,), strict=True):
            assert a.shape == b.shape and a.shape[0] == n
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_layer0_traces_as_one_graph(bundled):
    """Layer 0 (mHC attention and mHC MoE, static experts) under dynamo: one graph, no break;
    the MoE built with the sparse default too (it takes the static form while traced)."""
    _, module, *_, args = _setup(bundled, bundled.block("Sliding Window Layer"))
    torch._dynamo.reset()
    with torch.no_grad():
        ex = torch._dynamo.explain(module)(*args)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    _, moe, *_, args = _setup(bundled, bundled.block("Mixture of Experts"))
    moe.static_shapes = False
    torch._dynamo.reset()
    with torch.no_grad():
        sparse = torch._dynamo.explain(moe)(*args)
    assert (sparse.graph_count, sparse.graph_break_count) == (1, 0), sparse.break_reasons


@exhaustive
def test_whole_prefix_traces_as_one_graph(bundled):
    """The whole salvaged prefix (static experts) under dynamo: one graph, no break."""
    _, module, *_, args = _setup(bundled, interpreter.prefix(bundled.data))
    torch._dynamo.reset()
    with torch.no_grad():
        ex = torch._dynamo.explain(module)(*args)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons


@pytest.mark.slow
@pytest.mark.parametrize("title", ["Attention Core", "Mixture of Experts"])
def test_fullgraph_compile_agrees_with_the_interpreter(bundled, title):
    m = bundled.block(title)
    g, module, ins, tape, ref, _ = _setup(bundled, m)
    torch._dynamo.reset()
    res = _agrees(g, m, torch.compile(module, fullgraph=True), ins, tape, ref)
    assert res.ok, res.problem


@pytest.mark.slow
@pytest.mark.parametrize("title", ["Rotary Embedding", "Mixture of Experts"])
def test_frozen_compile_form_gives_the_eager_outputs(bundled, title):
    """The form for inference of docs/generated-modules.md (``torch.compile`` under
    ``torch.no_grad`` with inductor's ``freezing``: weights folded in as constants) gives eager's
    outputs within float32 rounding, and agrees with the interpreter at float32's tolerance."""
    import torch._inductor.config

    m = bundled.block(title)
    g, module, ins, tape, ref, args = _setup(bundled, m, dtype="float32")
    torch._dynamo.reset()
    with torch.no_grad():
        want = module(*args)
        with torch._inductor.config.patch(freezing=True):
            fast = torch.compile(module, fullgraph=True)
            got = fast(*args)
    for a, b in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,), strict=True):
        assert a.dtype == b.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max()))
    res = _agrees(g, m, fast, ins, tape, ref, "float32")
    assert res.ok, res.problem


def _every_block(spec):
    """Every structurally distinct block of ``spec``, and the salvaged prefix."""
    from ncdc.codegen.fingerprint import structural_key

    cache, seen, out = {}, set(), []
    for site in spec.blocks():
        key = structural_key(site.node, cache)
        if key not in seen:
            seen.add(key)
            out.append(site.node)
    return out + [interpreter.prefix(spec.data)]


@exhaustive
def test_every_block_exports_and_compiles_whole(bundled):
    """Every distinct block of the bundled spec exports and compiles with ``fullgraph=True``;
    both agree with the interpreter."""
    failures = []
    blocks = _every_block(bundled)
    assert blocks
    for m in blocks:
        name = getattr(m, "title", None) or "salvaged prefix"
        t0 = time.perf_counter()
        try:
            g, module, ins, tape, ref, args = _setup(bundled, m)
            res = _agrees(g, m, _export(g, module, args, tape).module(), ins, tape, ref)
            if not res.ok:
                failures.append(f"{name}: export: {res.problem}")
            torch._dynamo.reset()
            res = _agrees(g, m, torch.compile(module, fullgraph=True), ins, tape, ref)
            if not res.ok:
                failures.append(f"{name}: compile: {res.problem}")
        except Exception as exc:  # noqa: BLE001 - collected and reported together
            failures.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        print(f"{name}: {time.perf_counter() - t0:.0f} s", flush=True)
    assert not failures, "\n".join(failures)
