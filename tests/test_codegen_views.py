"""The affine view helpers of generated files (codegen/prelude/views.py): forward reads are views
of the source (no copy), and reads and writes trace as one graph (no ``storage_offset()``, no
data-dependent shapes). Their values are checked against naive loops in test_codegen_rules."""
from __future__ import annotations

import pytest

from tests.lazy import torch
from tests.profiling import peak_forward_bytes


def _same_storage(a, b) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_forward_reads_are_views_of_the_source():
    """``src[x + v]`` over ``(x, v)``, strided and shifted reads inside the source: views of
    the source itself; with padding, views of the padded copy (the size of the source)."""
    from ncdc.codegen.prelude.views import affine_read

    src = torch.randn(3, 10, 4)
    windows, live = affine_read(src, [((1, 1), 0)], (7, 4), dim=-2)
    assert windows.shape == (3, 7, 4, 4) and bool(live.all()) and _same_storage(windows, src)
    assert torch.equal(windows[:, 2, 3], src[:, 5])
    strided, _ = affine_read(src, [((2, 1), 1)], (4, 2), dim=-2)
    assert _same_storage(strided, src) and torch.equal(strided[:, 3, 1], src[:, 8])
    grid, _ = affine_read(src, [((1, 0), 2), ((0, 2), 0)], (3, 2))
    assert _same_storage(grid, src) and torch.equal(grid[:, 2, 1], src[:, 4, 2])
    padded, live = affine_read(src, [((1, 1), -3)], (10, 4), dim=-2)
    assert padded.untyped_storage().nbytes() == 3 * 13 * 4 * 4  # [3, 13, 4], not the windows
    assert not bool(live[0, 0]) and torch.equal(padded[:, 5, 2], src[:, 4])


def test_reads_inside_the_source_know_their_liveness_without_comparing():
    """A read that needs no padding (every position inside, as a decode step's window read of
    its kept entries) is live everywhere, known without computing a position: no comparison
    runs. A read that pads still compares, and is dead exactly outside."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from ncdc.codegen.prelude.views import affine_read

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    src = torch.randn(8, 4)
    with Ops() as inside:
        _, live = affine_read(src, [((1, -1), 7)], (1, 8), dim=-2, flip=False)
    assert bool(live.all()) and not {"ge", "lt"} & set(inside.names), inside.names
    with Ops() as padded:
        _, live = affine_read(src, [((1, -1), 0)], (8, 8), dim=-2, flip=False)
    assert {"ge", "lt"} <= set(padded.names)
    want = torch.tensor([[x - (7 - j) >= 0 for j in range(8)] for x in range(8)])
    assert torch.equal(live, want)


def test_view_helpers_trace_as_one_graph():
    """A window read backwards (padded, flipped), its liveness and a scatter with writes
    outside: one graph under dynamo, and the compiled function equals eager."""
    from ncdc.codegen.prelude.views import affine_read, affine_write


    def f(x):
        win, live = affine_read(x, [((1, -1), 0)], (x.shape[-2], 3), dim=-2)
        out, written = affine_write(x[..., 0], [((2,), 1)], (2 * x.shape[-1] + 1,))
        return win * live[..., None], out, written

    x = torch.randn(6, 4)
    ex = torch._dynamo.explain(f)(x)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    torch._dynamo.reset()
    for a, b in zip(torch.compile(f, fullgraph=True)(x), f(x), strict=True):
        assert torch.equal(a, b)


def test_backward_reads_come_flipped_as_views():
    """``flip=False``: a box dim read backwards comes in reverse order (values and ``live``)
    and the result is a view of the padded source, never a tokens x window copy."""
    from ncdc.codegen.prelude.views import affine_read

    gen = torch.Generator().manual_seed(3)
    src = torch.randn(2, 9, 5, generator=gen)
    for rows, sizes, dim, backwards in [([((1, -1), 0)], (9, 4), -2, [1]),
                                         ([((1, -2), 1)], (6, 3), -2, [1]),
                                         ([((-1, 1), 8)], (5, 3), -2, [0]),
                                         ([((1, 0), 0), ((0, -1), 4)], (9, 5), None, [1])]:
        want, want_live = affine_read(src, rows, sizes, dim=dim)
        got, live = affine_read(src, rows, sizes, dim=dim, flip=False)
        lead = 1
        assert torch.equal(got.flip([lead + i for i in backwards]), want), rows
        assert torch.equal(live.flip(backwards), want_live), rows
        # naive loop for the window read: win[b, x, v] = src[b, x - v] (0 outside)
        if rows == [((1, -1), 0)]:
            for x in range(9):
                for v in range(4):
                    ok = x - v >= 0
                    assert bool(live[x, 3 - v]) == ok
                    expect = src[:, x - v] if ok else torch.zeros(2, 5)
                    assert torch.equal(got[:, x, 3 - v], expect)
        if dim is not None:  # a view of the padded source: its size, not the window's
            assert got.untyped_storage().nbytes() < got.numel() * got.element_size()


def test_flipped_window_read_traces_as_one_graph():
    from ncdc.codegen.prelude.views import affine_read

    def f(x):
        win, live = affine_read(x, [((1, -1), 0)], (x.shape[-2], 3), dim=-2, flip=False)
        return (win * live[..., None]).sum(-2)

    x = torch.randn(7, 4)
    ex = torch._dynamo.explain(f)(x)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    torch._dynamo.reset()
    assert torch.equal(torch.compile(f, fullgraph=True)(x), f(x))


def _window_attention(spec, w):
    from ncdc import codegen, interpreter

    block = spec.block("Sliding Window Attention")
    env = spec.bind("tiny", sizes={"w": w}).env
    run = interpreter.interpret(block, env, stand_in=True)
    g = codegen.generate(block, env, runtime={"loader"})
    module = codegen.instantiate(codegen.load_module(g.source), g.class_name, torch.float64)
    g.load_params(module, run.params)
    return g, module, env


@pytest.mark.slow
def test_sliding_window_attention_never_copies_its_window(bundled):
    """The generated Sliding Window Attention passes its window to the Attention Core as a
    flipped view: the forward's peak grows with w by far less than one tokens x w x c copy
    (what the flipped read materialised), and the source names no flip of the window."""
    tokens, small, big = 256, 8, 64
    peaks = {}
    for w in (small, big):
        g, module, env = _window_attention(bundled, w)
        m = env.size(next(s for s in bundled.symbols.values() if s.label == "m"))
        c = env.size(next(s for s in bundled.symbols.values() if s.label == "c"))
        x = torch.randn(tokens, m, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0))
        peaks[w] = peak_forward_bytes(module, [x])
    copy = tokens * big * c * 8
    assert peaks[big] - peaks[small] < copy / 2, (peaks, copy)
    swa = g.source[g.source.index("class SlidingWindowAttention("):]
    assert "flip=False" in swa and ".flip(" not in swa


def test_equivariance_of_blocks_in_an_axis(bundled):
    """The Attention Core treats the window slots alike (a flipped window may enter it); the
    Sliding Window Attention rotates by token position, so it is not symmetric in the tokens,
    and the Mixing Coefficients block has no window axis at all (trivially symmetric)."""
    from ncdc.codegen.flips import equivariant
    from ncdc.codegen.generator import Generator

    env = bundled.bind("tiny").env
    gen = Generator(env, set(), "exact", [])
    core = bundled.block("Attention Core")
    tokens, window, _ = core.dom[2].shape
    assert window.label == "w|x" and tokens.label == "x"
    assert equivariant(gen, core, frozenset({window.uid}))
    swa = bundled.block("Sliding Window Attention")
    assert not equivariant(gen, swa, frozenset({swa.dom[0].shape[0].uid}))
    assert equivariant(gen, bundled.block("Mixing Coefficients"), frozenset({window.uid}))
