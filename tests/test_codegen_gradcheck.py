"""In exact mode generated modules are differentiable: ``torch.autograd.gradcheck`` (float64)
w.r.t. inputs and parameters on blocks with parameters (top-k selection is piecewise constant:
its gradient is the selected entries')."""
from __future__ import annotations

import pytest

from ncdc.codegen import compile_torch
from tests.lazy import functional_call, torch


@pytest.mark.parametrize("title", ["Mixing Coefficients", "Attention Core", "Expert Gate"])
def test_gradcheck(bundled, title):
    env = bundled.bind("tiny", sizes={"b": 2}).env
    block = bundled.block(title)
    _, module = compile_torch(block, env, dtype="float64")
    gen = torch.Generator().manual_seed(0)
    params = {}
    for name, p in module.named_parameters():
        params[name] = (torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.5
                        ).requires_grad_(True)
    inputs = [torch.randn(tuple(env.sizes(a.shape)), generator=gen, dtype=torch.float64,
                          requires_grad=True) for a in block.dom]
    names = list(params)

    def f(*args):
        out = functional_call(module, dict(zip(names, args[:len(names)], strict=True)), args[len(names):])
        out = out if isinstance(out, tuple) else (out,)
        return tuple(o for o in out if o.is_floating_point())

    assert torch.autograd.gradcheck(f, tuple(params.values()) + tuple(inputs), eps=1e-6,
                                    atol=1e-6, rtol=1e-5, fast_mode=True)
    # a plain backward reaches the inputs and the parameters that act through values (the
    # router bias acts only through the selection, whose gradient is zero by definition)
    out = f(*params.values(), *inputs)
    sum(o.sum() for o in out).backward()
    assert all(x.grad is not None for x in inputs)
    assert not names or any(params[n].grad is not None for n in names)
