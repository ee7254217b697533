"""The default generated module (no ``static_shapes``) under torch's tracers: while dynamo or
``torch.export`` traces it, the routed experts take the static pairs form by themselves (no
graph break, no data-dependent guard); eager calls keep the sparse form (exactly the live pairs,
counts read off the data)."""
from __future__ import annotations

import numpy as np
import pytest

from ncdc import codegen, interpreter
from ncdc.verify.check import CheckResult, compare, run_generated
from tests.lazy import torch


def _layer0(spec):
    """The generated module of layer 0 (tiny, float64, default constructor), its inputs and a
    check of a module against the interpreter."""
    m = spec.block("Sliding Window Layer")
    env = spec.bind("tiny").env
    run = interpreter.interpret(m, env, stand_in=True, seed=0)
    ins = interpreter.random_inputs(m, env, 0)
    tape = interpreter.random_tape(m, env, 0)
    ref = run.evaluate(*ins, tape=tape).outputs
    g = codegen.generate(m, env, runtime={"loader"})
    mod = codegen.load_module(g.source)
    module = codegen.instantiate(mod, g.class_name, torch.float64)
    g.load_params(module, run.params)
    args = [torch.from_numpy(np.array(a)).to(torch.float64) for a in ins]

    def check(mod_):
        res = CheckResult("Sliding Window Layer", "", "")
        compare(ref, run_generated(g, mod_, ins, tape, "float64"), "exact", "float64", res, m.cod)
        return res

    return mod, module, args, check


def _pair_forms(module, args) -> list[str]:
    """The form of every selection's pairs in one forward (``sparse``: counts a list)."""
    seen = []

    def hook(_, inputs):
        pairs = inputs[1]
        seen.append("sparse" if isinstance(pairs[2], list) else "static")

    experts = [m for m in module.modules() if type(m).__name__ == "RoutedExperts"]
    handles = [m.register_forward_pre_hook(hook) for m in experts]
    try:
        with torch.no_grad():
            module(*args)
    finally:
        for h in handles:
            h.remove()
    return seen


def test_eager_keeps_the_sparse_form(bundled):
    """An eager call of the default module computes the experts at exactly the live pairs, and
    agrees with the interpreter; ``static_shapes=True`` gives the static form."""
    _, module, args, check = _layer0(bundled)
    assert not module.single_pass_mhc_moe.body.static_shapes
    assert _pair_forms(module, args) == ["sparse"]
    res = check(module)
    assert res.ok and res.max_rel < 1e-12, res.problem
    module.single_pass_mhc_moe.body.static_shapes = True
    assert _pair_forms(module, args) == ["static"]


def test_tracing_switch_follows_the_tracer(bundled):
    """``tracing()`` of the pasted prelude: false in eager, true inside a compiled function."""
    mod, *_ = _layer0(bundled)
    assert mod.tracing() is False
    torch._dynamo.reset()
    flag = torch.compile(lambda x: x + 1 if mod.tracing() else x - 1, fullgraph=True,
                         backend="eager")(torch.zeros(1))
    assert flag.item() == 1.0


@pytest.mark.slow
def test_default_layer0_traces_as_one_graph_and_exports(bundled):
    """Layer 0 from the default constructor: one graph and no break under dynamo;
    ``torch.export.export(model, args)`` takes it, and the exported program agrees with the
    sparse eager forward (float64, 1e-12)."""
    _, module, args, check = _layer0(bundled)
    torch._dynamo.reset()
    with torch.no_grad():
        ex = torch._dynamo.explain(module)(*args)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    with torch.no_grad():
        ep = torch.export.export(module, tuple(args))
        got, want = ep.module()(*args), module(*args)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    res = check(ep.module())
    assert res.ok and res.max_rel < 1e-12, res.problem
