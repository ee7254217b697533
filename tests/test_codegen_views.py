"""The affine view helpers of generated files (codegen/prelude/views.py): forward reads are views
of the source (no copy), and reads and writes trace as one graph (no ``storage_offset()``, no
data-dependent shapes). Their values are checked against naive loops in test_codegen_rules."""
from __future__ import annotations

import torch
from ncdc.codegen.prelude.views import affine_read, affine_write


def _same_storage(a, b) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_forward_reads_are_views_of_the_source():
    """``src[x + v]`` over ``(x, v)``, strided and shifted reads inside the source: views of
    the source itself; with padding, views of the padded copy (the size of the source)."""
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


def test_view_helpers_trace_as_one_graph():
    """A window read backwards (padded, flipped), its liveness and a scatter with writes
    outside: one graph under dynamo, and the compiled function equals eager."""

    def f(x):
        win, live = affine_read(x, [((1, -1), 0)], (x.shape[-2], 3), dim=-2)
        out, written = affine_write(x[..., 0], [((2,), 1)], (2 * x.shape[-1] + 1,))
        return win * live[..., None], out, written

    x = torch.randn(6, 4)
    ex = torch._dynamo.explain(f)(x)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    torch._dynamo.reset()
    for a, b in zip(torch.compile(f, fullgraph=True)(x), f(x)):
        assert torch.equal(a, b)
