"""The generated top-k (``TopK`` in the WEIGHTS form, codegen/rules/selection.py) keeps the k
largest entries as a stable descending sort does: ties go to the lower position
(docs/format.md §11.16, interpreter/READINGS.md 13). Checked on scores built to tie, against
the rule written out in plain Python."""
from __future__ import annotations

import numpy as np
import pytest

from ncdc import codegen
from tests.lazy import torch


def _kept(row, k):
    """The rule from its description: rank by value, larger first, the lower position first
    among equals; keep the first k."""
    order = sorted(range(len(row)), key=lambda i: (-row[i], i))
    return {i for i in order[:k]}


@pytest.fixture(scope="module")
def gate(bundled):
    env = bundled.bind("tiny", sizes={"e": 12, "k": 4}).env
    g = codegen.generate(bundled.block("Expert Gate"), env)
    module = codegen.instantiate(codegen.load_module(g.source), g.class_name, torch.float64)
    with torch.no_grad():
        module.w_r.weight.zero_()  # every router score the same: the bias decides the ranking
    return module


@pytest.mark.parametrize("bias", [
    [0.0] * 12,                                             # all tied: the first k
    [1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0],                   # ties across the k-th place
    [0, 2, 0, 2, 0, 0, 1, 1, 1, 0, 1, 0],                   # 2 above, ties for the rest
    [0, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3, 3],                   # the top k last, no tie at k
    [-1, 5, -1, 5, -1, 5, -1, 5, -1, 5, -1, 5],             # six tied at the top
    [0.5, -0.0, 0.0, 0.5, 0.0, -0.0, 0.25, 0.25, 0, 0, 0, 0],  # signed zeros are equal
])
def test_ties_go_to_the_lower_position(gate, bias):
    k = gate.config.k
    with torch.no_grad():
        gate.bias.copy_(torch.tensor(bias, dtype=torch.float64))
        _, live = gate(torch.randn(3, 2, gate.config.hidden_width, dtype=torch.float64))
    want = _kept([float(b) for b in bias], k)
    for row in live.reshape(-1, len(bias)).tolist():
        assert {i for i, x in enumerate(row) if x} == want, (bias, row)


def test_random_rows_with_many_ties(gate):
    """Rows of small integers (ties at every place) against the rule, row by row."""
    k, n = gate.config.k, gate.config.experts
    gen = np.random.default_rng(0)
    for _ in range(40):
        bias = gen.integers(0, 3, n).astype(np.float64)
        with torch.no_grad():
            gate.bias.copy_(torch.from_numpy(bias))
            _, live = gate(torch.zeros(gate.config.hidden_width, dtype=torch.float64))
        assert set(np.flatnonzero(live.numpy())) == _kept(bias.tolist(), k), bias
