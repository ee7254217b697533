"""Blocks parametrised by their body (codegen/bodies.py): the two Single-Pass mHC classes of
layer 0, the same code around different bodies, are one class taking its body as an argument."""
from __future__ import annotations

import ast

from ncdc.codegen import generate, load_module


def _classes(source: str) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)}


def _init_args(cls: ast.ClassDef) -> list[str]:
    (init,) = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
    return [a.arg for a in init.args.args] + [a.arg for a in init.args.kwonlyargs]


def test_single_pass_mhc_is_one_class_taking_its_body(bundled):
    """One ``SinglePassMHC(config, body)`` built around each body by the layer, with the
    ``static_shapes`` switch the caller passes to the experts alone; ``state_dict`` keys under
    ``body``; the same source twice."""
    block, env = bundled.block("Sliding Window Layer"), bundled.bind("tiny").env
    g = generate(block, env, runtime={"loader"})
    assert g.source == generate(block, env, runtime={"loader"}).source
    classes = _classes(g.source)
    assert "SinglePassMHCMoE" not in classes
    assert _init_args(classes["SinglePassMHC"]) == ["self", "config", "body"]
    assert "static_shapes" in _init_args(classes["MixtureOfExperts"])
    assert "static_shapes" not in _init_args(classes["SinglePassMHC"])
    assert ("self.single_pass_mhc = SinglePassMHC(self.config, "
            "SlidingWindowAttention(self.config))") in g.source
    assert "MixtureOfExperts(self.config, static_shapes=static_shapes))" in g.source
    model = load_module(g.source).SlidingWindowLayer(static_shapes=True)
    assert type(model.single_pass_mhc) is type(model.single_pass_mhc_moe)
    assert type(model.single_pass_mhc.body).__name__ == "SlidingWindowAttention"
    assert type(model.single_pass_mhc_moe.body).__name__ == "MixtureOfExperts"
    assert model.single_pass_mhc_moe.body.static_shapes
    keys = set(model.state_dict())
    assert keys == set(g.param_keys)
    assert "single_pass_mhc.body.w_qa.weight" in keys
    assert "single_pass_mhc_moe.body.routed_experts.w_g" in keys
    assert not any(".sliding_window_attention." in k or ".mixture_of_experts." in k
                   for k in keys)
    assert g.param_keys["single_pass_mhc_moe.body.routed_experts.w_g"].endswith(
        "Mixture of Experts/Routed Experts/W^{G}.weight")
    text = repr(model)
    assert "(body): SlidingWindowAttention(" in text and "(body): MixtureOfExperts(" in text

