"""What inductor makes of generated code (issue 10 point 5): the rotary table is computed once
per forward, not again for every element that reads it, and a window read stays a view of the
padded source instead of a copy per window. Both are read off the C++ that ``torch.compile``
writes (``run_and_get_code``); the compiled values are checked against eager and numpy."""
from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

from ncdc import codegen
from tests.lazy import torch

_FOR = re.compile(r"for\(int64_t (\w+)=static_cast<int64_t>\((-?\d+)L?\); \1<static_cast<int64_t>"
                  r"\((-?\d+)L?\)")


def _loop_extents(code: str, pattern: str) -> list[int]:
    """For every line of inductor's C++ matching ``pattern``: the number of iterations of the
    loop nest around it (the product of the enclosing ``for`` ranges)."""
    found, stack, pending, depth = [], [], [], 0
    for line in code.splitlines():
        m = _FOR.search(line)
        if m:
            pending.append(int(m.group(3)) - int(m.group(2)))
        if re.search(pattern, line):
            found.append(int(np.prod([n for _, n in stack])) if stack else 1)
        for ch in line:
            if ch == "{":
                depth += 1
                if pending:
                    stack.append((depth, pending.pop()))
            elif ch == "}":
                if stack and stack[-1][0] == depth:
                    stack.pop()
                depth -= 1
    return found


def _compiled(fn, *args):
    from torch._inductor.utils import run_and_get_code  # seconds to import: not at collection

    torch._dynamo.reset()
    with torch.no_grad():
        out, codes = run_and_get_code(torch.compile(fn, fullgraph=True), *args)
    return out, "\n".join(codes)


def test_loop_extents_reads_nested_loops():
    code = """
    for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(6L); x0+=static_cast<int64_t>(1L))
    {
        for(int64_t x1=static_cast<int64_t>(0L); x1<static_cast<int64_t>(16L); x1+=static_cast<int64_t>(8L))
        {
            auto tmp0 = [&]
            {
                return x.cos();
            }
            ();
        }
        auto tmp1 = std::cos(y);
    }
    auto tmp2 = std::cos(z);
    """
    assert _loop_extents(code, r"cos\(") == [96, 6, 1]


@pytest.mark.slow
@pytest.mark.parametrize("title", ["Rotary Embedding", "Inverse Rotary Embedding"])
def test_rotary_table_is_computed_once_when_compiled(bundled, title):
    """Eight leading (head) dims read one ``[x, t]`` table: the compiled forward evaluates cos
    and sin over ``x * t`` positions only, and gives the eager values; the eager values match
    numpy (float64 angles, cos and sin, cast to float32, products rounded in float32)."""
    env = bundled.bind("tiny").env
    g = codegen.generate(bundled.block(title), env)
    module = codegen.instantiate(codegen.load_module(g.source), g.class_name, torch.float32)
    heads, tokens = 8, 40
    c, t = module.config.latent_width, module.config.t
    x = torch.randn(heads, tokens, c, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = module(x)
    got, code = _compiled(module, x)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)
    for fn in ("cos", "sin"):
        extents = _loop_extents(code, rf"\b{fn}\(|\.{fn}\(\)")
        assert extents and max(extents) <= tokens * t, (fn, extents)
    # the eager values, from the description: pairs (v[2i], v[2i+1]) turned by the angle
    # position * beta_0^(-i/t) (backwards for the inverse), the first c - 2t channels kept
    theta = float(module.config.beta_0) ** (-np.arange(t, dtype=np.float64) / t)
    angle = np.arange(tokens, dtype=np.float64)[:, None] * theta
    cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
    if title.startswith("Inverse"):
        sin = -sin
    v = x.numpy()
    re_, im = v[..., c - 2 * t::2], v[..., c - 2 * t + 1::2]
    ref = v.copy()
    ref[..., c - 2 * t::2] = re_ * cos - im * sin
    ref[..., c - 2 * t + 1::2] = re_ * sin + im * cos
    np.testing.assert_array_equal(want.numpy(), ref)


def _views_prelude():
    """The pasted views prelude, as the package's own module (one module object per file)."""
    return importlib.import_module("ncdc.codegen.prelude.views")


@pytest.mark.slow
def test_window_read_stays_a_view_when_compiled():
    """The Attention Core's two products over a window read ``[x, w|x, c]`` (reversed, a view)
    of a stored ``[x, c]`` source: inductor passes the padded source to both matrix products
    as strided views; no buffer of ``x * w * c`` elements is allocated. Values against a loop."""
    affine_read = _views_prelude().affine_read
    heads, tokens, c, w = 4, 48, 32, 16
    gen = torch.Generator().manual_seed(1)
    q, k, p = (torch.randn(heads, tokens, c, generator=gen), torch.randn(tokens, c, generator=gen),
               torch.randn(heads, tokens, w, generator=gen))

    def core(q, k, p):
        win, _ = affine_read(k, [((1, -1), 0)], (tokens, w), dim=-2, flip=False)
        win = win[None]
        return (torch.einsum("...xc,...xwc->...xw", q, win),
                torch.einsum("...xw,...xwc->...xc", p, win))

    (scores, mixed), code = _compiled(core, q, k, p)
    sizes = [int(np.prod([int(n) for n in m.group(1).split(",") if n.strip()]))
             for m in re.finditer(r"empty_strided_cpu\(\(([\d, ]+)\)", code)]
    assert sizes and tokens * w * c not in sizes, sizes
    assert "extern_kernels.bmm" in code
    # slot j of the reversed window holds token i - (w - 1 - j) (0 before the first token)
    padded = np.concatenate([np.zeros((w - 1, c), np.float32), k.numpy()])
    win = np.stack([padded[i:i + w] for i in range(tokens)])  # [x, w, c]
    np.testing.assert_allclose(scores.numpy(), np.einsum("hxc,xwc->hxw", q.numpy(), win),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mixed.numpy(), np.einsum("hxw,xwc->hxc", p.numpy(), win),
                               rtol=1e-5, atol=1e-5)
