"""The generated files' ``Linear`` (``codegen/prelude/linear.py``): ``F.linear``'s numbers, with
a 16-bit CPU product of at most 8 rows and 64 outputs computed in float32 and rounded once.
Checked against float64 numpy rounded by ml_dtypes, and by the dtypes ``F.linear`` is handed."""
from __future__ import annotations

import numpy as np
import pytest

from tests.lazy import ml_dtypes, torch


def _layer(n_in, n_out, dtype, bias=True):
    from ncdc.codegen.prelude.linear import Linear

    torch.manual_seed(0)
    layer = Linear(n_in, n_out, bias=bias)
    if bias:
        torch.nn.init.normal_(layer.bias)
    return layer.to(getattr(torch, dtype))


def _LinearDtypes():
    """A torch function mode recording the dtype of the input of every ``F.linear`` call (a
    class built on first use: collecting this module imports no torch)."""

    class LinearDtypes(torch.overrides.TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.nn.functional.linear:
                self.seen.append(args[0].dtype)
            return func(*args, **(kwargs or {}))

    return LinearDtypes()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("rows, n_out", [(1, 4), (8, 64), (3, 16)])
def test_a_small_16_bit_product_is_rounded_once_from_float32(dtype, rows, n_out):
    layer = _layer(512, n_out, dtype)
    x = torch.randn(rows, 512, generator=torch.Generator().manual_seed(1)).to(layer.weight.dtype)
    with torch.no_grad(), _LinearDtypes() as mode:
        y = layer(x)
    assert mode.seen == [torch.float32] and y.dtype == x.dtype
    # float64 from the same 16-bit values, rounded once to the dtype
    w, b = layer.weight.detach().double().numpy(), layer.bias.detach().double().numpy()
    exact = x.double().numpy() @ w.T + b
    want = exact.astype({"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype])
    want = want.astype(np.float64)
    got = y.double().numpy()
    ulp = np.abs(want) * (2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10)
    assert (got == want).mean() > 0.95                 # float32 sums: rarely one step off
    assert np.all(np.abs(got - want) <= ulp + 1e-30)
    # and what torch's own 16-bit kernel gives, to the same step
    with torch.no_grad():
        direct = torch.nn.functional.linear(x, layer.weight, layer.bias).double().numpy()
    assert np.all(np.abs(got - direct) <= 2 * ulp + 1e-30)


@pytest.mark.parametrize("rows, n_out, dtype", [(9, 4, "bfloat16"), (1, 65, "bfloat16"),
                                                (1, 4, "float32"), (1, 4, "float64")])
def test_other_products_are_f_linear_as_given(rows, n_out, dtype):
    layer = _layer(256, n_out, dtype, bias=False)
    x = torch.randn(rows, 256).to(layer.weight.dtype)
    with torch.no_grad(), _LinearDtypes() as mode:
        y = layer(x)
    assert mode.seen == [layer.weight.dtype]
    assert torch.equal(y, torch.nn.functional.linear(x, layer.weight))


def test_the_float32_path_trains_the_16_bit_weights():
    layer = _layer(64, 8, "bfloat16")
    x = torch.randn(2, 64, dtype=torch.bfloat16, requires_grad=True)
    layer(x).square().sum().backward()
    assert layer.weight.grad.dtype == torch.bfloat16 and x.grad.dtype == torch.bfloat16
    assert layer.weight.grad.abs().sum() > 0 and layer.bias.grad.abs().sum() > 0
