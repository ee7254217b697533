"""Hostile names in every field of a spec (titles, size symbols, axis labels, operator names)
compile to a module that imports, passes ruff and agrees with the interpreter (issue 8 pt 4)."""
from __future__ import annotations

import ast
import json
import shutil
import subprocess

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ncdc
from ncdc.codegen.emit import SizePrinter, einsum_letters
from ncdc.codegen.generate import generate, load_module
from ncdc.codegen.names import NN_MODULE_ATTRIBUTES, RESERVED_ATTRIBUTES
from ncdc.ir.errors import SpecError
from ncdc.ir.names import Name
from ncdc.ir.numeric import FreeNumeric
from ncdc.spec.loader import load_text
from ncdc.verify.check import check_morphism
from tests.lazy import torch

HOSTILE = ["None", "F", "super", "range", "torch", "nn", "math", "functools", "warnings", "self",
           "held", "forward", "training", "lead", "tape", "quant", "stand_in", "ValueError",
           "int", "PARAM_KEYS", "load_interpreter_params", "\u03b1", "\u00e9", "\ud800",
           "x y", "1abc", "__class__", "print", "_", "", "\\alpha", "lambda", "match", "type",
           "reset_parameters", "one", "theta", "Block", "MixingCoefficients", "m", "n",
           "x\"\"\"y", "a\\", "'", "{p}", "\\bar{p}", "live_pairs", "cls", "emulate",
           "data_missing", "register_buffer", "__init__", "T_1", "Linear"]
NAMES = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=6))



def test_the_written_out_module_attributes_are_the_installed_torchs():
    """Every attribute of the installed ``nn.Module`` is reserved: no generated member shadows it."""
    installed = {name for name in dir(torch.nn.Module) if not name.startswith("__")}
    assert installed == set(NN_MODULE_ATTRIBUTES)
    assert installed <= RESERVED_ATTRIBUTES

def _spec(mk, titles, symbols, axes, ops):
    """Outer block, over tokens x: a Linear m -> n (bias) in a block, an RMSNorm over n (epsilon a symbol), a
    Linear n -> m in a block; every name drawn."""
    s1 = mk.symbol(symbols[0], 3)
    s2 = mk.symbol(symbols[1], 2)
    s3 = mk.symbol(symbols[2], 1)
    m = mk.axis(axes[0], {"__ref__": s1})
    n = mk.axis(axes[1], {"__type__": "Multiplication", "content": [mk.int(2), mk.ref(s2)]})
    x = mk.axis(axes[2], 5)
    t0, t1, t2 = (mk.tag(t) for t in titles)
    up = mk.block(mk.bc(mk.op("Linear", name=ops[0], bias=True), [mk.weave(["*", m])],
                        [mk.weave(["*", n])], [mk.rearr([0], [x])]), t1)
    norm = mk.bc(mk.op("Normalize", name=ops[1], epsilon=mk.ref(s3), gain=True, bias=False),
                 [mk.weave(["*", n])], [mk.weave(["*", n])], [mk.rearr([0], [x])])
    down = mk.block(mk.bc(mk.op("Linear", name=ops[2], bias=False), [mk.weave(["*", n])],
                          [mk.weave(["*", m])], [mk.rearr([0], [x])]), t2)
    doc = mk.doc(mk.block(mk.composed(up, norm, down), t0))
    return ncdc.Spec(load_text(json.dumps(doc), "<hostile>", False))


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(titles=st.lists(NAMES, min_size=3, max_size=3),
       symbols=st.lists(NAMES, min_size=3, max_size=3),
       axes=st.lists(NAMES, min_size=3, max_size=3),
       ops=st.lists(NAMES, min_size=3, max_size=3))
def test_hostile_names_compile_lint_and_agree(mk, tmp_path_factory, titles, symbols, axes, ops):
    mk.repo.clear()
    spec = _spec(mk, titles, symbols, axes, ops)
    env = spec.bind("released").env
    g = generate(spec.data, env, runtime={"loader"})
    tree = ast.parse(g.source)
    assert all(n.isascii() for n in _identifiers(tree))
    mod = load_module(g.source)
    assert mod.PARAM_KEYS
    exe = shutil.which("ruff")
    if exe is not None:
        f = tmp_path_factory.mktemp("hostile") / "generated.py"
        f.write_text(g.source, encoding="utf-8")
        r = subprocess.run([exe, "check", "--isolated", "--no-cache", str(f)],
                           capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stdout
    r = check_morphism(spec.data, env, name="hostile")
    surrogate = any("\ud800" in s for s in titles + symbols + axes + ops)
    if surrogate and "interpreter failed: UnicodeEncodeError" in (r.problem or ""):
        # the interpreter's own key hashing refuses lone surrogates (interpreter/fixed.py
        # key_rng); the generated module must still run
        module = getattr(mod, g.class_name)()
        out = module(torch.ones(2, 5, 3, dtype=torch.float32))
        assert out.shape == (2, 5, 3)
        return
    assert r.ok, r.problem


def _identifiers(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.arg):
            yield node.arg


@given(st.lists(NAMES, min_size=1, max_size=60))
def test_einsum_letters_are_ascii_and_distinct(hints):
    labels = list(range(len(hints)))
    if len(hints) > 52:
        with pytest.raises(SpecError):
            einsum_letters(labels, lambda i: hints[i])
        return
    letters = einsum_letters(labels, lambda i: hints[i])
    assert len(set(letters.values())) == len(hints)
    assert all(ch.isascii() and ch.isalpha() for ch in letters.values())


def test_size_printer_is_exact_or_refuses():
    d, b = FreeNumeric(1, Name("d")), FreeNumeric(2, Name("b"))
    printer = SizePrinter(lambda s: s.label)
    for expr in [(2 ** d) * 3, b / 2 + sympy.Rational(1, 2), 2 ** 63 / b, (b + 1) * (d - 1),
                 b ** 2 / 4 + b, 7 - b]:
        code = printer(expr)
        for vb in (1, 2, 5, 8):
            for vd in (1, 3):
                want = sympy.floor(expr.subs({b: vb, d: vd}))
                assert eval(code, {"b": vb, "d": vd}) == want, (expr, code)
        assert eval(f"10 * {code}", {"b": 3, "d": 2}) == 10 * sympy.floor(
            expr.subs({b: 3, d: 2}))
    for bad in [sympy.sqrt(2), sympy.sqrt(b), sympy.Float(1.5) * b, 2 ** (d / 2)]:
        with pytest.raises(SpecError):
            printer(bad)
