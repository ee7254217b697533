"""The routed experts' pairs grouped by slot once (codegen/prelude/pairs.py): in both forms
``live_pairs`` orders the pairs by slot, so the grouped products neither sort nor permute; the
generated mixture at tiny against the routed experts written out in numpy from the block's
description, with unrouted experts' weights NaN and (static form) rows with dead pairs."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from ncdc import codegen
from tests.lazy import Deferred, FlopCounterMode, profile, torch

LAMBDA = 10.0


def _module(bundled, dtype, static):
    moe = bundled.block("Mixture of Experts")
    env = bundled.bind("tiny").env
    g = codegen.generate(moe, env)
    mod = codegen.load_module(g.source)
    module = codegen.instantiate(mod, g.class_name, codegen.DTYPES[dtype], static_shapes=static)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, p.shape[0] ** -0.5 if p.dim() > 1 else 1.0)
    return mod, module


@Deferred
def _FixedGate():
    class _FixedGate(torch.nn.Module):
        """A router that returns given gates and liveness (the part under test comes after it)."""

        def __init__(self, gate, live):
            super().__init__()
            self.gate, self.live = gate, live

        def forward(self, m):
            return self.gate, self.live

    return _FixedGate


def _routing(tokens, e, k, seed):
    """Gates ``[tokens, e]`` and liveness: k live experts per token among 1..e-1 (expert 0 is
    never routed), except every third token, which has k - 1 (the static form then holds a dead
    pair at slot 0)."""
    gen = np.random.default_rng(seed)
    live = np.zeros((tokens, e), dtype=bool)
    for t in range(tokens):
        live[t, 1 + gen.permutation(e - 1)[:k - (t % 3 == 0)]] = True
    gate = np.where(live, gen.uniform(0.1, 1.0, (tokens, e)), 0.0)
    return gate, live


def _numpy_moe(x, gate, live, p):
    """The mixture from its description: each live expert's SwiGLU (gate projection limited
    above at lambda, SiLU; up projection limited to +-lambda; product; down projection) summed
    under its gate, plus the shared expert (the same without routing)."""
    def swiglu(x, wg, wu, wd):
        g = np.minimum(x @ wg, LAMBDA)
        return (g / (1 + np.exp(-g)) * np.clip(x @ wu, -LAMBDA, LAMBDA)) @ wd

    out = swiglu(x, p["shared_expert.w_gs.weight"].T, p["shared_expert.w_us.weight"].T,
                 p["shared_expert.w_ds.weight"].T)
    wg, wu, wd = (p[f"routed_experts.{n}"] for n in ("w_g", "w_u", "w_d"))
    for t in range(x.shape[0]):
        for s in np.flatnonzero(live[t]):
            out[t] += gate[t, s] * swiglu(x[t], wg[:, s], wu[:, s], wd[:, s])
    return out


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_routed_experts_against_numpy(bundled, dtype, static):
    """Both forms, float64 and float32 (the grouped kernel), against numpy in float64; the
    unrouted expert 0 holds NaN weights and static rows with fewer live experts than k hold a
    dead pair at slot 0: neither reaches the output."""
    mod, module = _module(bundled, dtype, static)
    e, k = module.routed_experts.w_g.shape[1], module.config.k
    tokens, m = 30, module.routed_experts.w_g.shape[0]
    with torch.no_grad():
        for name in ("w_g", "w_u", "w_d"):
            getattr(module.routed_experts, name)[:, 0] = float("nan")
    params = {key: v.double().numpy() for key, v in module.state_dict().items()}
    gate, live = _routing(tokens, e, k, 1)
    torch_dtype = codegen.DTYPES[dtype]
    gate_t, x_t = (torch.from_numpy(a).to(torch_dtype) for a in
                   (gate, np.random.default_rng(2).standard_normal((tokens, m))))
    module.expert_gate = _FixedGate(gate_t, torch.from_numpy(live))
    with torch.no_grad():
        got = module(x_t).double().numpy()
    want = _numpy_moe(x_t.double().numpy(), gate_t.double().numpy(), live, params)
    tol = 1e-12 if dtype == "float64" else 1e-5
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    if static:  # the dead pairs were there, at the NaN expert
        _, slots, pair_live = mod.live_pairs(torch.from_numpy(live), (tokens,), k, True)
        assert int((~pair_live).sum()) == tokens // 3 and not slots[~pair_live].any()


def _count(fn, names):
    with profile() as prof:
        fn()
    return {n: sum(ev.name == n for ev in prof.events()) for n in names}


@pytest.mark.parametrize("static", [False, True])
def test_products_neither_sort_nor_permute(bundled, static):
    """One forward of the mixture sorts only where ``live_pairs`` groups the pairs (the
    router's top k takes ``topk`` and a count of the ties, no sort); its three grouped products
    sort, gather and scatter nothing (no ``index_copy``; the only row gather is the input's,
    once)."""
    mod, module = _module(bundled, "float32", static)
    x = torch.randn(16, module.routed_experts.w_g.shape[0])
    names = ("aten::sort", "aten::index_copy_", "aten::index_copy", "aten::index_select")
    with torch.no_grad():
        _, live = module.expert_gate(x)
        router = _count(lambda: module.expert_gate(x), names)
        pairs = _count(lambda: mod.live_pairs(live, (16,), module.config.k, static), names)
        forward = _count(lambda: module(x), names)
    assert router["aten::sort"] == 0 and pairs["aten::sort"] == (2 if static else 0)
    assert forward["aten::sort"] == router["aten::sort"] + pairs["aten::sort"]
    assert forward["aten::index_copy_"] == forward["aten::index_copy"] == 0
    # the input at the pairs' rows, the gate at the pairs (and live_pairs' own reorderings)
    assert forward["aten::index_select"] == pairs["aten::index_select"] + 2


@pytest.mark.parametrize("tokens, grouped", [(1, False), (16, True)])
def test_sparse_products_visit_only_busy_slots(bundled, tokens, grouped):
    """The sparse form knows how many pairs each slot has: with one token (a decoding step:
    k of e slots busy) its three products are one matrix product per busy slot, not one per
    slot as ``torch._grouped_mm`` runs them; with most slots busy it is the grouped kernel."""
    mod, module = _module(bundled, "float32", False)
    e, k = module.config.experts, module.config.k
    _, live = _routing(tokens, e, k, seed=1)
    pairs = mod.live_pairs(torch.from_numpy(live), (tokens,), k, False)
    busy = sum(map(bool, pairs[2]))
    x = torch.randn(tokens, module.routed_experts.w_g.shape[0])
    with torch.no_grad():
        counted = _count(lambda: module.routed_experts(x, pairs),
                         ("aten::mm", "aten::_grouped_mm"))
    if grouped:
        assert busy * 2 >= e and counted["aten::_grouped_mm"] == 3
    else:
        assert busy == int(live[0].sum()) and counted["aten::_grouped_mm"] == 0
        assert counted["aten::mm"] == 3 * busy


def test_expert_weights_are_held_one_expert_after_another(bundled):
    """The routed experts' weights keep the interpreter's shape ``[m, e, f]`` (state_dict and
    loading unchanged) but lie one expert after another in memory, so every expert's matrix,
    one grouped product's operand, is contiguous; a dtype move, a meta build with
    ``to_empty`` and ``load_state_dict`` keep that layout."""
    _, module = _module(bundled, "float32", False)
    m, e = module.config.hidden_width, module.config.experts

    def slot_major(mod):
        return all(getattr(mod.routed_experts, n).movedim(1, 0).is_contiguous()
                   for n in ("w_g", "w_u", "w_d"))

    assert module.routed_experts.w_g.shape[:2] == (m, e) and slot_major(module)
    with torch.device("meta"):
        meta = type(module)(module.config)
    meta.to_empty(device="cpu")
    meta.load_state_dict({k: v.contiguous() for k, v in module.state_dict().items()})
    assert slot_major(meta) and torch.equal(meta.routed_experts.w_d, module.routed_experts.w_d)
    assert slot_major(module.to(torch.bfloat16))


@pytest.mark.parametrize("experts,busy", [(3, 0), (0, 0), (3, 2)])
def test_gradients_where_a_rank_has_no_pairs_or_no_experts(experts, busy):
    """``ncdc::grouped_matmul``'s backward at a rank holding no pairs, or no experts at all (an
    expert-parallel slice): the gradients have the operands' shapes and are hand-computed
    per slot (zero where no pair is)."""
    from ncdc.codegen.prelude import pairs

    gen = torch.Generator().manual_seed(0)
    slots = torch.tensor([1] * busy, dtype=torch.int64)
    rows = torch.randn(busy, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = torch.randn(4, experts, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    out = pairs.grouped_matmul(rows, weight, 1, slots)
    (out.reshape(busy, 5) * torch.arange(5.0, dtype=torch.float64)).sum().backward()
    g = torch.arange(5.0, dtype=torch.float64).expand(busy, 5)
    want_w = torch.zeros(4, experts, 5, dtype=torch.float64)
    if busy:
        want_w[:, 1] = rows.detach().t() @ g
    torch.testing.assert_close(weight.grad, want_w, rtol=0, atol=1e-12)
    want_rows = g @ weight.detach()[:, 1].t() if busy else torch.zeros(0, 4, dtype=torch.float64)
    torch.testing.assert_close(rows.grad, want_rows, rtol=0, atol=1e-12)


def test_eager_products_without_gradients_skip_the_op(monkeypatch):
    """Eager routed experts that need no gradient (a decode step's few busy slots, a forward's
    many) run the op's kernel directly, not through ``ncdc::grouped_matmul``'s dispatch; with a
    gradient to compute, or under a FLOP counter, the op runs. All give the hand-computed
    products."""
    from ncdc.codegen.prelude import pairs

    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(4, 8, 5, dtype=torch.float64, generator=gen)
    calls = []
    op = pairs.grouped_matmul
    monkeypatch.setattr(pairs, "grouped_matmul", lambda *a: calls.append(1) or op(*a))
    for live_slots, grad, counted, via_op in (([1, 6], False, False, False),
                                              ([1, 6], True, False, True),
                                              ([0, 1, 2, 5, 6], False, False, False),
                                              ([0, 1, 2, 5, 6], False, True, True)):
        live = torch.zeros(3, 8, dtype=torch.bool)
        live[:, live_slots] = True
        p = pairs.live_pairs(live, (3,))
        x = torch.randn(3, 4, dtype=torch.float64, generator=gen, requires_grad=grad)
        calls.clear()
        counter = FlopCounterMode(display=False) if counted else contextlib.nullcontext()
        with torch.set_grad_enabled(grad), counter:
            got = pairs.pairwise_matmul(pairs.take_rows(x, 1, (3,), p), weight, 1, p)
        if counted:
            assert counter.get_total_flops() == 2 * 4 * 5 * len(p[0])
        want = torch.stack([x[r] @ weight[:, s]
                            for r, s in zip(p[0].tolist(), p[1].tolist(), strict=True)])
        torch.testing.assert_close(got, want, rtol=1e-13, atol=0)
        assert bool(calls) == via_op, (live_slots, grad)
