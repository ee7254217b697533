"""A ``Linear`` over several inputs means the same in both backends:
``y[o] = sum_{a, c} x1[a] x2[c] W[a, c, o] + b[o]`` (the weight holds every input's target
axes in input order, then the output's), checked against hand-written numpy."""
from __future__ import annotations

import numpy as np

import ncdc
from ncdc.codegen import compile_torch, load_interpreter_params
from ncdc.ir.params import param_specs
from tests.lazy import torch


def _two_input_linear(mk, bias=True):
    x, a, c, o = mk.axis("x", 5), mk.axis("a", 3), mk.axis("c", 2), mk.axis("o", 4)
    bc = mk.bc(mk.op("Linear", "W", bias=bias), [mk.weave(["*", a]), mk.weave(["*", c])],
               [mk.weave(["*", o])], [mk.rearr([0], [x]), mk.rearr([0], [x])])
    return mk.doc(mk.block(bc, mk.tag("Two-input Linear")))


def test_a_two_input_linear_agrees_with_numpy_in_both_backends(mk, load_doc):
    spec = load_doc(_two_input_linear(mk))
    assert [d for d in spec.validate() if d.severity == "error"] == []
    env = spec.bind("tiny").env
    rng = np.random.default_rng(20)
    x1, x2 = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    shapes = {p.role: tuple(int(env.size(s)) for s in p.shape) for p in param_specs(spec.data)}
    assert shapes == {"weight": (3, 2, 4), "bias": (4,)}
    keys = {p.role: p.key for p in param_specs(spec.data)}
    W, b = rng.standard_normal((3, 2, 4)), rng.standard_normal(4)
    params = {keys["weight"]: W, keys["bias"]: b}
    want = np.einsum("xa,xc,aco->xo", x1, x2, W) + b

    got = ncdc.interpret(spec.data, env=env, params=params)(x1, x2)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12)

    source, module = compile_torch(spec.data, env=env)
    assert "more than one input" not in source
    load_interpreter_params(module, params)
    out = module(torch.as_tensor(x1), torch.as_tensor(x2))
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-12)


def test_a_two_input_linear_over_a_partly_dead_input(mk, load_doc):
    """Input 1 is scattered onto the first two of three positions (the third is dead and
    counts 0); every row keeps a live entry, so every result is live."""
    x, a2, a, c, o = (mk.axis("x", 5), mk.axis("a'", 2), mk.axis("a", 3), mk.axis("c", 2),
                      mk.axis("o", 4))
    scatter = mk.bc(mk.op("CovariantView", "S", reindexing=mk.stride([a2], [(a, [1], 0)])),
                    [mk.weave(["*", a2])], [mk.weave(["*", a])], [mk.rearr([0], [x])])
    keep = mk.rearr_arrays([0], [mk.array([x, c])])
    lin = mk.bc(mk.op("Linear", "W"), [mk.weave(["*", a]), mk.weave(["*", c])],
                [mk.weave(["*", o])], [mk.rearr([0], [x]), mk.rearr([0], [x])])
    spec = load_doc(mk.doc(mk.block(mk.composed(mk.product(scatter, keep), lin),
                                    mk.tag("Scattered Linear"))))
    assert [d for d in spec.validate() if d.severity == "error"] == []
    env = spec.bind("tiny").env
    rng = np.random.default_rng(21)
    x1, x2, W = (rng.standard_normal((5, 2)), rng.standard_normal((5, 2)),
                 rng.standard_normal((3, 2, 4)))
    (key,) = [p.key for p in param_specs(spec.data)]
    want = np.einsum("xa,xc,aco->xo", x1, x2, W[:2])
    got = ncdc.interpret(spec.data, env=env, params={key: W})(x1, x2)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    _, module = compile_torch(spec.data, env=env)
    load_interpreter_params(module, {key: W})
    out = module(torch.as_tensor(x1), torch.as_tensor(x2))
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-12)
