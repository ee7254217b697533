"""Sibling Linears of one input as one product (codegen/siblings.py, prelude ``linears``): the
pass groups exactly the calls it may move, and ``linears`` gives what the separate calls give
(values and gradients), calling each layer where something is attached to one."""
from __future__ import annotations

from ncdc.codegen.siblings import NARROW, fuse_linears
from ncdc.codegen.statements import ASSIGN, Statement
from tests.lazy import torch

LAYERS = {"self.a": 4, "self.b": 4, "self.c": 16}


def _body(*lines):
    out = []
    for line in lines:
        target, expr = line.split(" = ", 1)
        out.append(Statement(ASSIGN, expr, (target,), headings=(f"# {target}",)))
    return out


def _code(body):
    return [f"{', '.join(s.targets)} = {s.expr}" for s in body]


def test_calls_of_one_input_become_one_call():
    body = fuse_linears(_body("x = y.flatten(-2)", "p = self.a(x)", "q = torch.sigmoid(p)",
                              "r = self.b(x)", "s = self.c(x).unflatten(-1, (4, 4))"), LAYERS)
    assert _code(body) == ["x = y.flatten(-2)", "p, r, s = linears(x, self.a, self.b, self.c)",
                           "q = torch.sigmoid(p)", "s = s.unflatten(-1, (4, 4))"]
    # the headings stay above the statements that follow them
    assert [s.headings for s in body] == [("# x",), ("# p",), ("# q",), ("# r", "# s")]


def test_the_argument_may_be_an_expression():
    body = fuse_linears(_body("p = self.a(h.flatten(-2))", "r = self.b(h.flatten(-2))"), LAYERS)
    assert _code(body) == ["p, r = linears(h.flatten(-2), self.a, self.b)"]


def test_no_group_where_moving_a_call_would_change_it():
    cases = [
        ("p = self.a(x)", "x = x + 1", "r = self.b(x)"),  # the argument rebound between
        ("p = self.a(x)", "q = r * 2", "r = self.b(x)"),  # a later target read before it
        ("p = self.a(x)", "r = p * 2", "r = self.b(x)"),  # ... or bound before it
        ("p = self.a(x)", "r = self.a(x)"),  # one layer twice
        ("p = self.a(x)", "r = self.b(z)"),  # other inputs
        ("p = self.a(x)", "r = self.wide(x)"),  # not a narrow Linear
        ("p = self.a(x) + self.b(x)",),  # two calls in one statement
    ]
    for lines in cases:
        body = _body(*lines)
        assert fuse_linears(body, {**LAYERS, "self.wide": NARROW + 1}) == body, lines
    rounded = _body("p = self.a(x)", "r = self.b(x)")
    rounded[1] = Statement(ASSIGN, "self.b(x)", ("r",), rounding=object())
    assert fuse_linears(rounded, LAYERS) == rounded


def _layers(bias=True):
    from ncdc.codegen.prelude.linear import Linear

    torch.manual_seed(0)
    return [Linear(32, n, bias=bias).double() for n in (4, 4, 16)]


def test_linears_equals_the_separate_calls_with_their_gradients():
    from ncdc.codegen.prelude.linear import linears

    for bias in (True, False):
        layers = _layers(bias)
        x = torch.randn(5, 32, dtype=torch.float64, requires_grad=True)
        got = linears(x, *layers)
        want = [m(x) for m in layers]
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-14, atol=1e-14)
        grads = torch.autograd.grad(sum((g * g).sum() for g in got),
                                    [x, *(p for m in layers for p in m.parameters())])
        ref = torch.autograd.grad(sum((w * w).sum() for w in want),
                                  [x, *(p for m in layers for p in m.parameters())])
        for g, r in zip(grads, ref, strict=True):
            torch.testing.assert_close(g, r, rtol=1e-13, atol=1e-13)


def test_linears_calls_each_layer_where_something_is_attached():
    from ncdc.codegen.prelude.linear import linears

    layers, x, seen, ops = _layers(), torch.randn(3, 32, dtype=torch.float64), [], []
    with _Counting(ops):
        linears(x, *layers)
    assert len(ops) == 1  # one product of the stacked weights
    handle = layers[1].register_forward_hook(lambda m, a, o: seen.append(m))
    try:
        ops.clear()
        with _Counting(ops):
            linears(x, *layers)
        assert seen == [layers[1]] and len(ops) == 3
    finally:
        handle.remove()

    class Adapter(type(layers[0])):  # a wrapped layer (LoRA and the like) is called as itself
        def forward(self, x):
            return super().forward(x) + 1

    adapted = Adapter(32, 4).double()
    adapted.load_state_dict(layers[0].state_dict())
    got = linears(x, adapted, layers[1])
    torch.testing.assert_close(got[0], layers[0](x) + 1)
    torch.testing.assert_close(got[1], layers[1](x))


def _Counting(ops):  # noqa: N802 - a context manager class built lazily (torch's base class)
    from torch.overrides import TorchFunctionMode

    class Counting(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.nn.functional.linear:
                ops.append(func)
            return func(*args, **(kwargs or {}))

    return Counting()
