"""The first forward of a generated module costs about what later ones do: the grouped products'
custom op (``ncdc::grouped_matmul``, codegen/prelude/pairs.py) is registered with plain kernels,
so its first call imports nothing (``torch.library.custom_op`` kernels load torch._dynamo, sympy
and torch.onnx on first call: seconds)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CODE = textwrap.dedent("""
    import json, sys, time, torch
    import ncdc
    from ncdc.codegen import compile_torch
    spec = ncdc.load()
    _, m = compile_torch(spec.block("Mixture of Experts"), spec.bind("tiny").env,
                         dtype="float32")
    x = torch.randn(12, 64)
    before = set(sys.modules)
    t = time.perf_counter(); m(x); first = time.perf_counter() - t
    new = sorted(set(sys.modules) - before)
    t = time.perf_counter(); m(x); second = time.perf_counter() - t
    print(json.dumps({"first": first, "second": second, "new": new}))
""")


def test_first_forward_imports_nothing_and_costs_little_more():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                         check=True, timeout=300)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    heavy = [n for n in r["new"] if n.split(".")[:2] in (["torch", "_dynamo"], ["torch", "onnx"])
             or n.split(".")[0] == "sympy"]
    assert not heavy, heavy[:5]
    assert len(r["new"]) < 20, r["new"][:20]
    assert r["first"] - r["second"] <= 0.5, r
