"""The generated files' ``Linear`` (``codegen/prelude/linear.py``): ``F.linear``'s numbers, with
a 16-bit CPU product of at most 8 rows and 64 outputs computed in float32 and rounded once, and
one of at least 32 rows and fewer than 32 outputs as the transposed product; ``linears``, several
layers on one input as one product. Checked against float64 numpy rounded by ml_dtypes, and by
the torch functions the layers call."""
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
    """A torch function mode recording the dtype of the input of every ``F.linear`` call in
    ``seen``, and every product's function in ``products`` (a class built on first use:
    collecting this module imports no torch)."""
    products = {torch.nn.functional.linear: "linear", torch.addmm: "addmm",
                torch.mm: "mm", torch.matmul: "matmul"}

    class LinearDtypes(torch.overrides.TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen, self.products = [], []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.nn.functional.linear:
                self.seen.append(args[0].dtype)
            if func in products:
                self.products.append(products[func])
            return func(*args, **(kwargs or {}))

    return LinearDtypes()


def _check_rounded_once(y, x, layer, dtype):
    """``y`` is the float64 product of the 16-bit values rounded once to ``dtype``, but for a
    step of the last place now and then (float32 sums in another order), and within a step of
    what torch's own 16-bit kernel gives."""
    w = layer.weight.detach().double().numpy()
    b = 0 if layer.bias is None else layer.bias.detach().double().numpy()
    exact = x.double().numpy().reshape(-1, w.shape[1]) @ w.T + b
    want = exact.astype({"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype])
    want = want.astype(np.float64)
    got = y.double().numpy().reshape(want.shape)
    ulp = np.abs(want) * (2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10)
    assert (got == want).mean() > 0.95
    assert np.all(np.abs(got - want) <= ulp + 1e-30)
    with torch.no_grad():
        direct = torch.nn.functional.linear(x, layer.weight, layer.bias).double().numpy()
    assert np.all(np.abs(got - direct.reshape(want.shape)) <= 2 * ulp + 1e-30)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("rows, n_out", [(1, 4), (8, 64), (3, 16)])
def test_a_small_16_bit_product_is_rounded_once_from_float32(dtype, rows, n_out):
    layer = _layer(512, n_out, dtype)
    x = torch.randn(rows, 512, generator=torch.Generator().manual_seed(1)).to(layer.weight.dtype)
    with torch.no_grad(), _LinearDtypes() as mode:
        y = layer(x)
    assert mode.seen == [torch.float32] and y.dtype == x.dtype
    _check_rounded_once(y, x, layer, dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("lead, n_out, bias", [((32,), 4, True), ((4, 64), 16, False),
                                                ((40,), 31, True)])
def test_a_long_16_bit_product_with_few_outputs_is_the_transposed_one(dtype, lead, n_out, bias):
    layer = _layer(512, n_out, dtype, bias=bias)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(*lead, 512, generator=gen).to(layer.weight.dtype)
    with torch.no_grad(), _LinearDtypes() as mode:
        y = layer(x)
    assert mode.products == ["addmm" if bias else "mm"]
    assert y.shape == (*lead, n_out) and y.dtype == x.dtype
    _check_rounded_once(y, x, layer, dtype)


@pytest.mark.parametrize("rows, n_out, dtype", [(9, 4, "bfloat16"), (31, 16, "bfloat16"),
                                                (1, 65, "bfloat16"), (64, 32, "float16"),
                                                (1, 4, "float32"), (64, 4, "float64")])
def test_other_products_are_f_linear_as_given(rows, n_out, dtype):
    layer = _layer(256, n_out, dtype, bias=False)
    x = torch.randn(rows, 256).to(layer.weight.dtype)
    with torch.no_grad(), _LinearDtypes() as mode:
        y = layer(x)
    assert mode.seen == [layer.weight.dtype] and mode.products == ["linear"]
    assert torch.equal(y, torch.nn.functional.linear(x, layer.weight))


@pytest.mark.parametrize("rows", [2, 40])
def test_both_kernels_train_the_16_bit_weights(rows):
    layer = _layer(64, 8, "bfloat16")
    x = torch.randn(rows, 64, dtype=torch.bfloat16, requires_grad=True)
    layer(x).float().square().sum().backward()
    assert layer.weight.grad.dtype == torch.bfloat16 and x.grad.dtype == torch.bfloat16
    # the gradients of F.linear's product, to bfloat16's precision
    xd, wd = x.detach().double(), layer.weight.detach().double()
    g = 2 * (xd @ wd.T + layer.bias.detach().double())
    torch.testing.assert_close(layer.weight.grad.double(), g.T @ xd, rtol=0.05, atol=0.05)
    torch.testing.assert_close(layer.bias.grad.double(), g.sum(0), rtol=0.05, atol=0.05)


def _three(dtype, bias=True):
    """The mHC's three coefficient maps, 2,048 inputs to 4, 4 and 16 outputs."""
    return [_layer(2048, n, dtype, bias=bias) for n in (4, 4, 16)]


@pytest.mark.parametrize("dtype, rows", [("bfloat16", 256), ("float32", 64)])
def test_linears_is_one_product_with_each_layers_numbers(dtype, rows):
    from ncdc.codegen.prelude.linear import linears

    layers = _three(dtype)
    x = torch.randn(rows, 2048, generator=torch.Generator().manual_seed(3)).to(
        layers[0].weight.dtype)
    with torch.no_grad(), _LinearDtypes() as mode:
        ys = linears(x, *layers)
    assert len(mode.products) == 1
    for y, layer in zip(ys, layers, strict=True):
        assert y.shape == (rows, layer.out_features)
        if dtype == "bfloat16":
            _check_rounded_once(y, x, layer, dtype)
        else:
            want = x.double() @ layer.weight.double().T + layer.bias.double()
            torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)


def test_linears_calls_each_layer_where_stacking_would_not_pay_or_would_hide_a_call():
    from ncdc.codegen.prelude.linear import Linear, linears

    layers = _three("float32")
    one = torch.randn(1, 2048)  # one token: the weights outnumber the input
    many = torch.randn(64, 2048)

    def products(x, *ls):
        with torch.no_grad(), _LinearDtypes() as mode:
            ys = linears(x, *ls)
        for y, layer in zip(ys, ls, strict=True):
            torch.testing.assert_close(y, torch.nn.functional.linear(x, layer.weight, layer.bias))
        return len(mode.products)

    assert products(one, *layers) == 3
    assert products(many, *layers) == 1
    seen = []
    handle = layers[1].register_forward_hook(lambda m, a, out: seen.append(out.shape))
    assert products(many, *layers) == 3 and seen == [(64, 4)]
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, a, out: None)
    try:
        assert products(many, *layers) == 3
    finally:
        handle.remove()

    class Adapted(Linear):  # a wrapper (a LoRA adapter, say) changes what the layer computes
        def forward(self, x):
            return super().forward(x) + 1

    adapted = Adapted(2048, 4)
    with torch.no_grad():
        ys = linears(many, layers[0], adapted)
    torch.testing.assert_close(ys[1], torch.nn.functional.linear(many, adapted.weight,
                                                                 adapted.bias) + 1)
    assert products(many, layers[0], _layer(2048, 4, "float32", bias=False)) == 2


def test_linears_trains_every_layer():
    from ncdc.codegen.prelude.linear import linears

    layers = _three("float32")
    x = torch.randn(64, 2048, dtype=torch.float64)
    for layer in layers:
        layer.double()
    sum(y.square().sum() for y in linears(x, *layers)).backward()
    for layer in layers:
        g = 2 * (x @ layer.weight.detach().T + layer.bias.detach())
        torch.testing.assert_close(layer.weight.grad, g.T @ x)
        torch.testing.assert_close(layer.bias.grad, g.sum(0))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_vecmat_sums_few_rows_in_float32_rounded_once(dtype):
    """The mHC's collapse, 256 tokens of four streams: float64 numpy rounded once by ml_dtypes,
    and the batched 16-bit kernel (``torch.matmul``) left out."""
    from ncdc.codegen.prelude.linear import vecmat

    gen = torch.Generator().manual_seed(4)
    t = getattr(torch, dtype)
    v, m = torch.rand(256, 4, generator=gen).to(t), torch.randn(256, 4, 512, generator=gen).to(t)
    with torch.no_grad(), _LinearDtypes() as mode:
        y = vecmat(v, m)
    assert "matmul" not in mode.products and y.dtype == t and y.shape == (256, 512)
    exact = np.einsum("xn,xnm->xm", v.double().numpy(), m.double().numpy())
    want = exact.astype({"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype])
    want = want.astype(np.float64)
    got = y.double().numpy()
    ulp = np.abs(want) * (2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10)
    assert (got == want).mean() > 0.99
    # (a step of the last place, or the float32 sums' order near 0 after cancelling)
    assert np.all(np.abs(got - want) <= ulp + 1e-6)


@pytest.mark.parametrize("shape_v, shape_m, dtype", [((1, 4), (1, 4, 512), "bfloat16"),
                                                     ((256, 9), (256, 9, 64), "bfloat16"),
                                                     ((256, 4), (256, 4, 64), "float32")])
def test_vecmat_is_matmul_elsewhere(shape_v, shape_m, dtype):
    from ncdc.codegen.prelude.linear import vecmat

    t = getattr(torch, dtype)
    v, m = torch.rand(*shape_v).to(t), torch.randn(*shape_m).to(t)
    with torch.no_grad(), _LinearDtypes() as mode:
        y = vecmat(v, m)
    assert mode.products == ["matmul"]
    assert torch.equal(y, torch.matmul(v.unsqueeze(-2), m).squeeze(-2))


def test_vecmat_broadcasts_and_trains():
    from ncdc.codegen.prelude.linear import vecmat

    v = torch.rand(64, 4, dtype=torch.bfloat16, requires_grad=True)
    m = torch.randn(2, 64, 4, 32, dtype=torch.bfloat16, requires_grad=True)
    y = vecmat(v, m)
    assert y.shape == (2, 64, 32)
    y.float().sum().backward()
    torch.testing.assert_close(v.grad.float(), m.detach().float().sum((0, -1)),
                               rtol=0.02, atol=0.05)
    torch.testing.assert_close(m.grad.float(), v.detach().float()[None, :, :, None].expand(
        2, 64, 4, 32), rtol=0, atol=0)
