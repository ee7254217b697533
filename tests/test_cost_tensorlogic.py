"""FLOPs of pyncd's TensorLogic equations, counted by hand."""
from __future__ import annotations

import sympy

import ncdc
from ncdc.ir.cost_rules import flops
from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.walk import walk
from tests.conftest import PYNCD


def test_matmul_equation_costs_two_flops_per_multiply_add():
    spec = ncdc.load(PYNCD / "tl_matmul.json")
    (b,) = [s.node for s in walk(spec.data) if isinstance(s.node, Broadcasted)]
    w, x = b.dom  # W[i, k], X[k, j]: Y[i, j] = sum_k W[i, k] X[k, j]
    i, k = (a.size for a in w.shape)
    j = x.shape[1].size
    assert sympy.simplify(flops(b) - 2 * i * j * k) == 0
