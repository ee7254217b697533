"""A method's loop in a 16-bit module (the 19 Sinkhorn rounds) carries its values in float32 and
rounds them once after it (codegen/PRECISION.md): its result is within one bfloat16 rounding of
the rounds computed in float64 by hand from the same first round."""
from __future__ import annotations

import numpy as np

from ncdc.codegen import generate, instantiate, load_module
from tests.lazy import torch


def test_sinkhorn_rounds_round_once(bundled):
    env = bundled.bind("tiny").env
    g = generate(bundled.site("Mixing Coefficients").node, env)
    torch.manual_seed(0)
    mc = instantiate(load_module(g.source), g.class_name, torch.bfloat16).eval()
    n, m = mc.config.streams, mc.config.hidden_width
    torch.nn.init.normal_(mc.h_2.weight, std=0.5)  # scores spread enough that the rounds work
    first = {}
    round_one = mc.first_sinkhorn_round
    mc.first_sinkhorn_round = lambda x: first.setdefault("out", round_one(x))
    x = torch.randn(64, n, m, generator=torch.Generator().manual_seed(1)).bfloat16()
    with torch.no_grad():
        got = mc(x)[2]
    assert got.dtype == torch.bfloat16
    eps = mc.config.varepsilon_hc
    ref = first["out"].double().numpy()
    for _ in range(19):  # each later round: rows, then columns, divided by their sums plus eps
        ref = ref / (ref.sum(-1, keepdims=True) + eps)
        ref = ref / (ref.sum(-2, keepdims=True) + eps)
    rel = np.abs(got.double().numpy() - ref) / np.abs(ref)
    assert rel.max() <= 2.0 ** -8, rel.max()  # one rounding to bfloat16 (half an ulp: 2^-9)
