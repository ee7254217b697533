"""Block calls run over chunks of the token axis (codegen/chunks.py, prelude chunks.py).

The analysis decides from the IR which blocks compute every token from that token alone and
grow along a window over it; the generated caller then runs them over chunks of tokens whose
rows come from a byte budget (``CHUNK_BYTES``, set small here so that tiny sizes split). The
chunked module is checked against hand-written numpy (tests/oracles/attention.py, written from
the blocks' descriptions), against itself unchunked (bit for bit), and for its peak memory.
"""
from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest
import sympy

from ncdc import codegen, interpreter
from ncdc.codegen.chunks import chunk_axis, pointwise
from ncdc.codegen.generator import Generator
from ncdc.ir import AffineSparseAxis, Arithmetic, Einops, FreeNumeric, RawAxis, SoftMax
from ncdc.ir.env import Env
from ncdc.ir.names import Name
from ncdc.ir.numeric import FREE_INPUT
from ncdc.ir.params import param_specs
from tests.lazy import torch
from tests.oracles import attention
from tests.oracles.common import random_params
from tests.oracles.ir_build import (
    MXFP8,
    R,
    array,
    bc,
    block,
    composed,
    product,
    rearr,
    stride,
    weave,
)
from tests.profiling import peak_forward_bytes

_UIDS = itertools.count(960_000)


# -- the analysis on hand-built blocks --------------------------------------------------------
def _axes():
    n = FreeNumeric(next(_UIDS), Name("n"))
    x = RawAxis(next(_UIDS), Name("x"), n)
    c = RawAxis(next(_UIDS), Name("c"), sympy.Integer(4))
    w = AffineSparseAxis(next(_UIDS), Name("w|x"), sympy.Integer(3), guides=(x,),
                         guide_strides=(sympy.Integer(1),), stride=sympy.Integer(-1))
    return n, x, c, w


def _core(x, c, w, q_read=None, scores_then=None):
    """``q[x, c], K[x, w|x, c] -> o[x, c]``: ``o = sum_w exp(q . K_w) K_w``, an attention core
    without its denominator; ``q_read``: the query's reindexing (default: at the same token);
    ``scores_then``: an operation on the ``[x, w|x]`` scores before the exponential."""
    qa, Ka = array(R, x, c), array(R, x, w, c)
    copy = rearr([0, 1, 1], qa, Ka)
    scores = bc(Einops(Name("scores"), signature=((0,), (0,))),
                [weave(R, "*", c), weave(R, "*", "*", c)], [weave(R, "*", "*")],
                [q_read or rearr([0], x, w), rearr([0, 1], x, w)])
    keep = rearr([0], array(R, x, w, c))
    steps = [copy, product(scores, keep)]
    if scores_then is not None:
        steps.append(product(scores_then, keep))
    exp = bc(Arithmetic(Name("exp"), formula=sympy.exp(FREE_INPUT)), [weave(R, "*", "*")],
             [weave(R, "*", "*")], [rearr([0, 1], x, w)])
    mix = bc(Einops(Name("mix"), signature=((0,), (0,))),
             [weave(R, "*", w), weave(R, "*", w, "*")], [weave(R, "*", "*")],
             [rearr([0], x, c), rearr([0, 1], x, c)])
    return block(composed(*steps, product(exp, keep), mix), "core")


@pytest.fixture
def gen_for():
    return lambda n: Generator(Env(), {n}, "exact", [])


def test_a_window_core_is_chunked_along_its_tokens(gen_for):
    n, x, c, w = _axes()
    core = _core(x, c, w)
    found = chunk_axis(gen_for(n), core)
    assert found is not None
    axis, width, grows = found
    assert axis == x and [a.uid for a in grows] == [w.uid]
    assert width == (sympy.Integer(4),)  # the widest: o[x, c] (4 a token), not the scores (3)


def test_a_reduction_along_the_tokens_is_never_chunked(gen_for):
    """A softmax over x (every token's score depends on every other's) is not pointwise in
    x; the same block with the softmax over the window slots is."""
    n, x, c, w = _axes()
    over_x = bc(SoftMax(Name("sm")), [weave(R, x, "*")], [weave(R, x, "*")], [rearr([0], w)])
    core = _core(x, c, w, scores_then=over_x)
    gen = gen_for(n)
    assert not pointwise(gen, core, x) and chunk_axis(gen, core) is None
    over_w = bc(SoftMax(Name("sm")), [weave(R, "*", w)], [weave(R, "*", w)], [rearr([0], x)])
    assert chunk_axis(gen, _core(x, c, w, scores_then=over_w)) is not None


def test_reads_across_tokens_block_scales_and_lengths_are_not_pointwise(gen_for):
    n, x, c, w = _axes()
    gen = gen_for(n)
    # the query read at the previous token
    shifted = stride([x, w], [(x, [1, 0], -1)])
    assert not pointwise(gen, _core(x, c, w, q_read=shifted), x)
    # MXFP8 scores with x last: the rounding groups 32 tokens
    to_fp8 = bc(Arithmetic(Name("t"), formula=FREE_INPUT), [weave(R, "*", "*")],
                [weave(MXFP8, "*", "*")], [rearr([1, 0], w, x)])
    assert not pointwise(gen, block(to_fp8, "t"), x)
    assert pointwise(gen, block(to_fp8, "t"), w)
    # a formula naming the token count
    per_token = bc(Arithmetic(Name("mean"), formula=FREE_INPUT / n), [weave(R, "*", "*")],
                   [weave(R, "*", "*")], [rearr([0, 1], x, c)])
    assert not pointwise(gen, block(per_token, "m"), x)
    # elementwise along x, no window: pointwise, but nothing grows, so never chunked
    plain = bc(Arithmetic(Name("sq"), formula=FREE_INPUT ** 2), [weave(R, x, c)],
               [weave(R, x, c)], [rearr([])], backup=())
    assert pointwise(gen, block(plain, "sq"), x) and chunk_axis(gen, block(plain, "sq")) is None


def test_the_bundled_decisions(bundled):
    """Of the bundled blocks the Attention Core (over the window w|x) and the N-gram Hash
    (over the n-gram window L|x) are chunked along the tokens; the Sliding Window Attention
    rotates by token position and reads windows, so it is not."""
    env = bundled.bind("tiny").env
    data = importlib.import_module("ncdc.codegen.generate").data_symbols
    swa = bundled.block("Sliding Window Attention")
    gen = Generator(env, data(swa, param_specs(swa, env)), "exact", [])
    core = chunk_axis(gen, bundled.block("Attention Core"))
    assert core is not None and core[0].label == "x" and [a.label for a in core[2]] == ["w|x"]
    assert chunk_axis(gen, bundled.block("Sliding Window Attention")) is None
    assert chunk_axis(gen, bundled.block("Mixing Coefficients")) is None


# -- the generated Sliding Window Attention, chunked ------------------------------------------
def _const(env, label):
    return float(next(v for s, v in env.values.items() if s.label == label))


def _size(env, label):
    return int(next(v for s, v in env.values.items() if s.label == label))


def _swa(bundled, quant="exact", w=None, seed=3):
    """(env, params, generated module's namespace, module) of the Sliding Window Attention at
    tiny sizes with random non-trivial parameters."""
    env = bundled.bind("tiny", sizes={"w": w} if w else None).env
    blk = bundled.block("Sliding Window Attention")
    base = interpreter.init_params(blk, env, stand_in=True)
    params = random_params(interpreter.interpret(blk, env, stand_in=True).param_specs, env,
                           seed, base)
    g = codegen.generate(blk, env, quant=quant, runtime={"loader"})
    ns = codegen.load_module(g.source)
    module = codegen.instantiate(ns, g.class_name, codegen.DTYPES["float64"])
    g.load_params(module, params)
    return env, params, g, ns, module


def _counting(module, windows=None):
    """The token count of every call of the Attention Core (``windows``: the bytes of the
    storage under each call's window argument)."""
    calls = []
    forward = module.attention_core  # a base-class method: the block holds nothing of its own

    def counted(*args):
        calls.append(args[1].shape[-2])
        if windows is not None:
            windows.append(args[2].untyped_storage().nbytes())
        return forward(*args)

    module.attention_core = counted
    return calls


def test_chunked_attention_matches_the_oracle_and_itself_unchunked(bundled):
    env, params, g, ns, module = _swa(bundled)
    assert "attention_core = chunked(" in g.source
    h, c = _size(env, "h"), _size(env, "c")
    u = torch.randn(2, 14, _size(env, "m"), dtype=torch.float64,
                    generator=torch.Generator().manual_seed(0))
    whole = module(u)
    windows = []
    calls = _counting(module, windows)
    ns.CHUNK_BYTES = 4 * 2 * h * max(c, _size(env, "w")) * 8  # 4 rows of both sequences
    got = module(u)
    assert calls == [4, 4, 3, 3]  # 14 tokens in chunks of even sizes
    # every chunk's window: a view of the latents padded by w - 1 tokens, not a copy
    assert set(windows) == {2 * (14 + _size(env, "w") - 1) * c * 8}
    assert torch.equal(got, whole)
    k = "Sliding Window Attention/"
    names = {"sink": "sink.weight", "WQa": "W^{Qa}.weight", "gq": "RMSNorm.gain",
             "WQb": "W^{Qb}.weight", "WKV": "W^{KV}.weight", "gkv": "RMSNorm~1.gain",
             "WOa": "Grouped Output Projection/W^{Oa}.weight",
             "WOb": "Grouped Output Projection/W^{Ob}.weight"}
    P = {n: np.asarray(params[k + key]) for n, key in names.items()}
    for b in range(2):
        want = attention.sliding_window_attention(
            u[b].numpy(), P, h, _size(env, "g"), _size(env, "w"), _size(env, "t"),
            _const(env, r"\epsilon"), _const(env, r"\beta_{0}"))
        np.testing.assert_allclose(got[b].detach().numpy(), want, rtol=1e-13, atol=1e-13)


def test_chunked_emulation_is_bit_identical(bundled):
    env, _, _, ns, module = _swa(bundled, quant="emulate")
    u = torch.randn(11, _size(env, "m"), dtype=torch.float64,
                    generator=torch.Generator().manual_seed(1))
    whole = module(u)
    calls = _counting(module)
    ns.CHUNK_BYTES = 1
    assert torch.equal(module(u), whole) and calls == [1] * 11


def _core_with_dead_rows(bundled):
    """A caller of the bundled Attention Core that reads its window two tokens back: the
    first two rows have no live slot, the next ones some dead slots."""
    from ncdc.ir import BlockOperator, View

    core = bundled.block("Attention Core")
    _, (x, c), (_, w, _) = [a.shape for a in core.dom]
    q_dt, k_dt = core.dom[1].datatype, core.dom[2].datatype
    sink, q, k = array(core.dom[0].datatype), array(q_dt, x, c), array(k_dt, x, c)
    window = bc(View(Name("win")), [weave(k_dt, "*", c)], [weave(k_dt, "*", "*", c)],
                [stride([x, w], [(x, [1, -1], -2)])])
    call = bc(BlockOperator(Name("core"), block=core),
              [weave(a.datatype, *a.shape) for a in core.dom],
              [weave(a.datatype, *a.shape) for a in core.cod], [rearr([])] * 3)
    return block(composed(product(rearr([0], sink), rearr([0], q), window), call), "caller"), \
        (sink, q, k)


@pytest.fixture
def one_row_chunks(monkeypatch):
    """Generated files chunk one row at a time (``CHUNK_BYTES = 1``)."""
    gen_mod = importlib.import_module("ncdc.codegen.generate")
    prelude = gen_mod._prelude

    def one_row(name):
        imports, body = prelude(name)
        return imports, body.replace("CHUNK_BYTES = 4 << 20", "CHUNK_BYTES = 1")

    monkeypatch.setattr(gen_mod, "_prelude", one_row)


@pytest.mark.parametrize("quant", ["exact", "emulate"])
def test_dead_slots_and_rows_with_no_live_slot(bundled, one_row_chunks, quant):
    """Chunked to one row at a time, the caller agrees with the interpreter (values and
    liveness; bit for bit in emulate mode)."""
    from ncdc.verify.check import check_morphism

    caller, _ = _core_with_dead_rows(bundled)
    env = bundled.bind("tiny").env
    g = codegen.generate(caller, env, quant=quant, runtime={"loader"})
    assert "chunked(" in g.source and "CHUNK_BYTES = 1\n" in g.source
    res = check_morphism(caller, env, quant=quant, seeds=2)
    assert res.ok, res.problem


def test_decoding_a_few_tokens_at_a_time_when_chunked(bundled, one_row_chunks):
    """``prefill`` and ``step`` (prelude decoding) with one-row chunks: every position as the
    interpreter gives it on the whole sequence."""
    from ncdc.verify.decoder_check import check_incremental

    blk = bundled.block("Sliding Window Attention")
    env = bundled.bind("tiny").env
    assert "CHUNK_BYTES = 1\n" in codegen.generate(blk, env).source
    res = check_incremental(blk, env, prefill=3, chunks=(1, 4))
    assert res.ok, res.problem


def test_gradients_through_chunks(bundled):
    env, _, _, ns, module = _swa(bundled)
    ns.CHUNK_BYTES = 1
    calls = _counting(module)
    u = torch.randn(5, _size(env, "m"), dtype=torch.float64, requires_grad=True,
                    generator=torch.Generator().manual_seed(2))
    assert torch.autograd.gradcheck(module, (u,), eps=1e-6, atol=1e-6, rtol=1e-5,
                                    fast_mode=True)
    assert calls and set(calls) == {1}


@pytest.mark.slow
def test_compiles_as_one_graph_and_exports_when_chunked(bundled):
    env, _, _, ns, module = _swa(bundled)
    ns.CHUNK_BYTES = 5 * _size(env, "h") * _size(env, "c") * 8  # 5 rows: 3 even chunks of 12
    u = torch.randn(12, _size(env, "m"), dtype=torch.float64,
                    generator=torch.Generator().manual_seed(4))
    calls = _counting(module)
    with torch.no_grad():
        want = module(u)
        assert calls == [4, 4, 4]
        del module.attention_core  # the class's own again
        torch._dynamo.reset()
        ex = torch._dynamo.explain(module)(u)
        assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
        torch._dynamo.reset()
        compiled = torch.compile(module, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(u), want, rtol=1e-13, atol=1e-13)
        ep = torch.export.export(module, (u,))
        torch.testing.assert_close(ep.module()(u), want, rtol=1e-13, atol=1e-13)


# -- memory -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_window(bundled):
    """256 tokens, w = 8 and 128, a 64 KiB budget: chunked, the forward's peak grows by less
    than a quarter of one [h, x, w] score array; unchunked (budget unbounded) by more than
    two."""
    tokens, budget = 256, 64 << 10
    peaks = {}
    for w in (8, 128):
        env, _, _, ns, module = _swa(bundled, w=w)
        u = torch.randn(tokens, _size(env, "m"), dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0))
        for chunked in (True, False):
            ns.CHUNK_BYTES = budget if chunked else 1 << 50
            peaks[w, chunked] = peak_forward_bytes(module, [u])
    scores = _size(env, "h") * tokens * (128 - 8) * 8
    grown = {on: peaks[128, on] - peaks[8, on] for on in (True, False)}
    assert grown[False] > 2 * scores, (peaks, scores)
    assert grown[True] < scores / 4, (peaks, scores)
