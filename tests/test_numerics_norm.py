"""RMSNorm statistics in float32 at least (codegen/PRECISION.md): float16 activations past 256
square past its range; with the statistic widened, Mixing Coefficients (RMSNorm over the
streams, then three linear maps, sigmoids and Sinkhorn rounds) agrees with the float64
interpreter on activations scaled by 1000 and by 1e-3 in every 16-bit dtype."""
from __future__ import annotations

import pytest

from ncdc import interpreter
from ncdc.codegen import generate
from ncdc.verify.check import ModuleCache, check_morphism

CACHE = ModuleCache()


@pytest.fixture(scope="module")
def env(bundled):
    return bundled.bind("tiny").env


@pytest.mark.parametrize("scale", [1e3, 1e-3])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mixing_coefficients_with_huge_and_tiny_activations(bundled, env, dtype, scale):
    block = bundled.block("Mixing Coefficients")
    x = interpreter.random_inputs(block, env, 0)[0] * scale
    assert (x * x).max() > 65504 or scale < 1  # float16 would overflow the squares
    r = check_morphism(block, env, dtype=dtype, inputs=[x], cache=CACHE)
    assert r.ok, r.problem


def test_the_statistic_is_widened(bundled, env):
    """Mixing Coefficients normalises over trailing, all-live dims: ``F.rms_norm``, whose
    statistic torch computes in float32 for 16-bit inputs (checked here against float64 on
    squares past float16's range); elsewhere the rule widens it itself."""
    import torch

    src = generate(bundled.block("Mixing Coefficients"), env).source
    assert "F.rms_norm(" in src or ("torch.promote_types(" in src and ".pow(2).mean(" in src)
    x = torch.tensor([[300.0, 400.0, 500.0, 100.0], [3e-4, 4e-4, 5e-4, 1e-4]],
                     dtype=torch.float64)
    want = x / x.pow(2).mean(dim=-1, keepdim=True).sqrt()
    for dtype in (torch.float16, torch.bfloat16):
        got = torch.nn.functional.rms_norm(x.to(dtype), (4,), None, 0.0).double()
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=torch.finfo(dtype).eps * 4, atol=0.0)
