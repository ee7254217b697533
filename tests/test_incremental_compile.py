"""``step`` under ``torch.compile`` and ``torch.export`` (tiny preset, float32): one graph with
no break, compiled once and reused for every one-token step (the position counter is a tensor
in the state, every state entry has a fixed shape: dead entries before the first token rather
than shorter tensors); compiled and exported steps give the eager steps' outputs and states, and
the whole-sequence ``forward``'s outputs.

Compiling is slow on two cores: CI compiles the sliding-window attention with inductor and the
salvaged model with ``aot_eager`` (dynamo's graph capture and guards are the backend's inputs:
the same graph count and recompilations), and exports the salvaged model.
``NCDC_SLOW_TESTS=1`` adds inductor on layer 0 and on the salvaged model."""
from __future__ import annotations

import functools
import inspect

import pytest

import ncdc
from ncdc import codegen, interpreter
from ncdc.codegen.decoder import token_input
from ncdc.ir.axes import is_token_axis
from tests.conftest import EXHAUSTIVE
from tests.lazy import Deferred, torch

SWA = "Sliding Window Attention"
MODEL = "(model)"
PREFILL, STEPS = 2, 10
"""Two tokens prefilled, then ten steps of one token: the window (7 entries at tiny) fills
(dead entries at the first steps) and then slides, all with one graph."""
TOL = {"rtol": 1e-5, "atol": 1e-5}
"""float32: compiled kernels reorder and fuse float32 arithmetic."""


@functools.cache
def _spec():
    return ncdc.load()


def _block(label):
    return _spec().model() if label == MODEL else _spec().block(label)


def _counter(backend):
    from torch._dynamo.testing import CompileCounterWithBackend  # seconds: not at collection

    return CompileCounterWithBackend(backend)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


def _setup(label):
    """The block's generated module (float32, static-shape experts, stand-in user data) and
    ``inputs(lo, hi)``: the seeded interpreter inputs' tokens ``lo`` to ``hi``."""
    env = _spec().bind("tiny").env
    block = _block(label)
    g = codegen.generate(block, env, runtime={"loader", "decoding"})
    mod = codegen.load_module(g.source)
    cls = getattr(mod, g.class_name)
    params = inspect.signature(cls).parameters
    kwargs = {k: True for k in ("static_shapes", "stand_in") if k in params}
    torch.manual_seed(0)
    module = codegen.instantiate(mod, g.class_name, torch.float32, **kwargs)
    xs = [torch.from_numpy(x) for x in interpreter.random_inputs(block, env, 0)]
    xs = [x.float() if x.is_floating_point() else x for x in xs]
    dims = [next((i for i, a in enumerate(arr.shape) if is_token_axis(a)), None)
            for arr in block.dom]
    k = token_input(block)[0]
    assert xs[k].shape[dims[k]] >= PREFILL + STEPS

    def inputs(lo, hi):
        return [x if d is None else x.narrow(d, lo, hi - lo) for x, d in zip(xs, dims, strict=True)]
    return module, inputs


def _outs(out):
    return list(out) if isinstance(out, tuple) else [out]


def _decode(module, inputs, step):
    """Eager prefill, then ``step`` one token at a time: the outputs of every call, the states."""
    outs, states = [], []
    with torch.no_grad():
        out, state = module.prefill(*inputs(0, PREFILL))
        outs.append(_outs(out))
        for t in range(PREFILL, PREFILL + STEPS):
            out, state = step(*inputs(t, t + 1), state=state)
            outs.append(_outs(out))
            states.append(state)
    return outs, states


def _same(got, want, **tol):
    """Every call's outputs and every step's state, ``got`` against ``want``."""
    (got_outs, got_states), (want_outs, want_states) = got, want
    assert len(got_outs) == len(want_outs) == 1 + STEPS and len(got_states) == STEPS
    for go, wo in zip(got_outs, want_outs, strict=True):
        for a, b in zip(go, wo, strict=True):
            torch.testing.assert_close(a, b, **tol)
    for gs, ws in zip(got_states, want_states, strict=True):
        assert list(gs) == list(ws)
        for k in ws:
            torch.testing.assert_close(gs[k], ws[k], **tol)


def _compiled_once(label, backend):
    """Compile ``step`` whole; decode with it and eagerly. Returns the compile count and both
    decodings."""
    module, inputs = _setup(label)
    counter = _counter(backend)
    step = torch.compile(module.step, fullgraph=True, backend=counter)
    compiled = _decode(module, inputs, step)
    eager = _decode(module, inputs, module.step)
    return counter, compiled, eager, module, inputs


CASES = [(SWA, "inductor"), (MODEL, "aot_eager"),
         pytest.param("Sliding Window Layer", "inductor", marks=EXHAUSTIVE),
         pytest.param(MODEL, "inductor", marks=EXHAUSTIVE)]


@pytest.mark.slow
@pytest.mark.parametrize(("label", "backend"), CASES)
def test_step_compiles_once_and_agrees(label, backend):
    """``torch.compile(module.step, fullgraph=True)``: one graph, compiled at the first step and
    reused by the next nine (past the window too); outputs and states as eager steps give them,
    and the outputs as ``forward`` on the whole sequence gives them."""
    counter, compiled, eager, module, inputs = _compiled_once(label, backend)
    assert counter.frame_count == 1, f"{counter.frame_count} compilations over {STEPS} steps"
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    state = compiled[1][-1]
    assert int(state["tokens"]) == PREFILL + STEPS
    assert all(v.shape == eager[1][0][k].shape for k, v in state.items())
    _same(compiled, eager, **TOL)
    with torch.no_grad():
        whole = _outs(module(*inputs(0, PREFILL + STEPS)))
    dims = [next((i for i, a in enumerate(arr.shape) if is_token_axis(a)), None)
            for arr in _block(label).cod]
    checked = 0
    for j, d in enumerate(dims):
        if d is not None:
            got = torch.cat([o[j] for o in compiled[0]], d - len(_block(label).cod[j].shape))
            torch.testing.assert_close(got, whole[j], **TOL)
            checked += 1
    assert checked


@pytest.mark.slow
def test_step_has_no_graph_break():
    """``torch._dynamo.explain``: one graph, no break (the window read, the rotary positions
    from the counter; ``fullgraph=True`` above asserts the same of the whole prefix)."""
    module, inputs = _setup(SWA)
    with torch.no_grad():
        _, state = module.prefill(*inputs(0, PREFILL))
        ex = torch._dynamo.explain(module.step)(*inputs(PREFILL, PREFILL + 1), state=state)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons


@pytest.mark.slow
def test_state_shapes_are_fixed_from_the_first_call():
    """Every state entry has its final shape right after the prefill: the window holds
    ``w - 1`` latents, the n-gram ``L - 1`` token ids, dead before the first token."""
    module, inputs = _setup(MODEL)
    _, states = _decode(module, inputs, module.step)
    with torch.no_grad():
        _, first = module.prefill(*inputs(0, 1))
    shapes = {k: tuple(v.shape) for k, v in first.items()}
    assert all({k: tuple(v.shape) for k, v in s.items()} == shapes for s in states)
    (win,) = (v for k, v in shapes.items() if k.endswith(".win"))
    (ngram,) = (v for k, v in shapes.items() if k.endswith(".ngram"))
    assert win[0] == 7 and ngram == (3,) and shapes["tokens"] == ()
    # one token: the two entries before it are dead (0), the third is its (compressed) id
    assert first[next(k for k in first if k.endswith(".ngram"))].tolist()[:2] == [0, 0]


@pytest.mark.slow
def test_the_counter_sees_recompilation():
    """The count these tests assert can fail: a step of two tokens is a new shape (a second
    graph), and a state whose counter is a Python int specialises the graph to it."""
    module, inputs = _setup(SWA)
    counter = _counter("eager")
    step = torch.compile(module.step, fullgraph=True, backend=counter)
    with torch.no_grad():
        _, state = module.prefill(*inputs(0, PREFILL))
        _, state = step(*inputs(2, 3), state=state)
        _, state = step(*inputs(3, 5), state=state)
        assert counter.frame_count == 2
        torch._dynamo.reset()
        counter = _counter("eager")
        step = torch.compile(module.step, fullgraph=True, backend=counter)
        for t in range(5, 8):
            _, state = step(*inputs(t, t + 1), state={**state, "tokens": int(state["tokens"])})
        assert counter.frame_count > 1


@Deferred
def _Step():
    class _Step(torch.nn.Module):
        """``model.step`` as a module's ``forward``, for ``torch.export``."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, *inputs, state):
            return self.model.step(*inputs, state=state)

    return _Step


EXPORTED = [MODEL, pytest.param("Sliding Window Layer", marks=EXHAUSTIVE)]


@pytest.mark.slow
@pytest.mark.parametrize("label", EXPORTED)
def test_step_exports(label):
    """``torch.export.export`` of the step with the state as inputs and outputs (static
    shapes): the state's tensors are the program's inputs, and the one program, run at every
    step, gives the eager steps' outputs and states."""
    module, inputs = _setup(label)
    with torch.no_grad():
        _, state = module.prefill(*inputs(0, PREFILL))
        ep = torch.export.export(_Step(module), tuple(inputs(PREFILL, PREFILL + 1)),
                                 {"state": state})
    names = ep.graph_signature.user_inputs
    assert len(names) == len(inputs(0, 1)) + len(state) and "state_tokens" in names
    exported = _decode(module, inputs, ep.module())
    eager = _decode(module, inputs, module.step)
    _same(exported, eager, **TOL)
