"""The normalisation pipeline (ir/pipeline.py): each pass once per term, in order, before any
backend walks the term; no backend walk applies a rewrite; the passes keep parameter keys;
the bundled layer 0 comes out with no ``e^x ; L1`` pair and its sink softmax shifted."""
from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import pytest

from ncdc import interpreter
from ncdc.codegen import generate
from ncdc.ir import pipeline
from ncdc.ir.morphisms import Block, Broadcasted, Composed
from ncdc.ir.operators import BlockOperator, ParaBlockOperator
from ncdc.ir.params import param_specs
from ncdc.ir.pipeline import PASSES, normalize
from ncdc.ir.readings import apply_reading
from ncdc.ir.rewrites import (
    BankDiagonal,
    ContractionView,
    Fused,
    SinkShift,
    bank_diagonal,
    contraction_view,
    softmax_pair,
)

ROOT = Path(__file__).resolve().parent.parent
LAYER0 = "Sliding Window Layer"


def _terms(m, seen=None):
    """Every morphism below ``m`` (boxes' blocks included), each once."""
    seen = set() if seen is None else seen
    if id(m) in seen:
        return
    seen.add(id(m))
    yield m
    for _, c in m.children():
        yield from _terms(c, seen)
    if isinstance(m, Broadcasted) and isinstance(m.operator, (BlockOperator, ParaBlockOperator)):
        yield from _terms(m.operator.block, seen)


def _pairs(m, match):
    return [(a, b) for c in _terms(m) if isinstance(c, Composed) and not isinstance(c, Fused)
            for a, b in itertools.pairwise(c.content) if match(a, b)]


@pytest.fixture(scope="module")
def layer0(bundled):
    return bundled.block(LAYER0)


def test_layer0_normalized_has_no_exp_l1_pair_and_a_shifted_sink(layer0):
    assert _pairs(layer0, softmax_pair)                      # the spec has some
    assert not any(isinstance(getattr(t, "operator", None), SinkShift) for t in _terms(layer0))
    normal = normalize(layer0)
    assert not _pairs(normal, softmax_pair)
    assert sum(isinstance(getattr(t, "operator", None), SinkShift) for t in _terms(normal)) == 1
    banks = [t for t in _terms(normal) if isinstance(t, BankDiagonal)]
    assert banks and len(banks) == len(_pairs(layer0, bank_diagonal))
    assert not any(isinstance(t, Fused) for t in _terms(normalize(layer0, fusion=None)))


def test_each_backend_gets_its_own_fusion_and_only_it(layer0):
    """The interpreter's term groups bank diagonals, the code generator's contraction + View
    pairs (every pair of the unfused term that the match accepts, and nothing else)."""
    plain = normalize(layer0, fusion=None)
    for fusion, cls, match in (("bank_diagonal", BankDiagonal, bank_diagonal),
                               ("contraction_view", ContractionView, contraction_view)):
        normal = normalize(layer0, fusion=fusion)
        fused = [t for t in _terms(normal) if isinstance(t, Fused)]
        assert fused and all(type(t) is cls for t in fused)
        assert len(fused) == len(_pairs(plain, match))
        assert not _pairs(normal, match)                       # each pair grouped
        assert all(match(*t.content) for t in fused)
    with pytest.raises(ValueError):
        normalize(layer0, fusion="no such fusion")


def test_a_contraction_view_needs_a_relabelling_view(layer0):
    """The code generator's pairs include the bank diagonals and more (a View that only
    relabels, not only one that takes a diagonal); a contraction whose View shifts or strides
    a dim is not one."""
    plain = normalize(layer0, fusion=None)
    banks, views = _pairs(plain, bank_diagonal), _pairs(plain, contraction_view)
    assert {id(a) for a, _ in banks} <= {id(a) for a, _ in views}
    assert len(views) > len(banks)
    a, b = banks[0]
    assert not contraction_view(b, a) and not contraction_view(a, a)


@pytest.mark.parametrize("reading", ["faithful", "pyncd"])
def test_the_passes_keep_parameter_keys(bundled, layer0, reading):
    env = bundled.bind("tiny").env
    for root in (layer0, interpreter.prefix(bundled.data)):
        read = apply_reading(root, reading)        # pyncd adds Normalize gains and shifts
        want = [(p.key, p.role, p.shape) for p in param_specs(read, env)]
        got = [(p.key, p.role, p.shape) for p in param_specs(normalize(root, reading=reading),
                                                             env)]
        assert got == want


def test_normalize_is_memoised_and_idempotent(layer0):
    a = normalize(layer0)
    assert normalize(layer0) is a
    assert normalize(a) is a
    assert normalize(layer0, fusion=None) is not a
    assert normalize(layer0, fusion="contraction_view") is not a
    with pytest.raises(ValueError):
        normalize(layer0, skip=("no such pass",))


def test_each_pass_runs_once_per_root_across_both_backends(bundled, monkeypatch):
    """A fresh root through the interpreter (twice), the code generator and
    normalize itself: every pass ran exactly once on it, in the order of PASSES."""
    env = bundled.bind("tiny").env
    root = dataclasses.replace(bundled.block("Attention Core"))   # a new root object
    calls = []

    def counted(name, step):
        def run(term, **kw):
            out = step(term, **kw)
            calls.append((name, term, out))
            return out
        return run

    monkeypatch.setattr(pipeline, "PASSES", tuple((n, counted(n, s)) for n, s in PASSES))
    interpreter.interpret(root, env)
    interpreter.interpret(root, env, seed=1)
    generate(root, env)
    normalize(root)
    chain, ran = {id(root)}, []
    for name, term, out in calls:
        if id(term) in chain:
            chain.add(id(out))
            ran.append(name)
    assert ran == [n for n, _ in PASSES]


BACKEND_WALKS = ["interpreter/evaluate.py", "interpreter/plan.py", "interpreter/plan_steps.py",
                 "interpreter/plan_demand.py", "interpreter/plan_experts.py",
                 "interpreter/fusion.py", "codegen/lower.py", "codegen/broadcast.py"]
REWRITES = ("softmax_pair", "softmax_pairs", "stable_composition", "bank_diagonals",
            "bank_diagonal", "contraction_view", "contraction_views", "fusible_view",
            "apply_reading", "normalize")
"""Names of the rewrites and pattern matches (a backend's rule for a fused node, such as
``lower_contraction_view``, is not one)."""


@pytest.mark.parametrize("path", BACKEND_WALKS)
def test_no_backend_walk_applies_a_rewrite(path):
    text = (ROOT / path).read_text(encoding="utf-8")
    assert not [r for r in REWRITES if re.search(rf"(?<!\w){r}\(", text)]


def test_each_backend_normalizes_at_its_entry():
    for path in ("interpreter/api.py", "codegen/generate.py"):
        assert "normalize(" in (ROOT / path).read_text(encoding="utf-8")


def test_hooks_see_the_spec_blocks_not_the_rewritten_ones(bundled):
    """The Attention Core's body is rebuilt by the sink pass (and its ancestors with it): the
    observer and on_entry still receive the spec's own Block objects."""
    env = bundled.bind("tiny").env
    blk = bundled.block("Sliding Window Attention")
    assert normalize(blk) is not blk
    spec_blocks = {id(t) for t in _terms(blk) if isinstance(t, Block)}
    seen = []
    run = interpreter.interpret(blk, env, stand_in=True)
    xs = interpreter.random_inputs(blk, env, 0)
    run.evaluate(*xs, observer=lambda b, *_: seen.append(b))
    run.evaluate(*xs, on_entry=lambda b, *_: seen.append(b))
    assert seen and {id(b) for b in seen} <= spec_blocks
    assert any(b.title == "Attention Core" for b in seen)


def test_the_code_generators_fold_computes_what_the_plain_composition_does(bundled, monkeypatch):
    """Routed Experts holds a ContractionView: generated with the pass, its per-expert Linear
    and View are one einsum (another source); generated with the pass made the identity, the
    two steps; both modules give the same numbers on the same weights and inputs."""
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    from ncdc import codegen

    env = bundled.bind("tiny").env
    blk = bundled.block("Routed Experts")
    assert any(isinstance(t, ContractionView)
               for t in _terms(normalize(blk, fusion="contraction_view")))
    run = interpreter.interpret(blk, env, stand_in=True)
    xs = [torch.from_numpy(np.asarray(x)) for x in interpreter.random_inputs(blk, env, 0)]

    def module(g):
        m = codegen.instantiate(codegen.load_module(g.source), g.class_name, torch.float64)
        g.load_params(m, run.params)
        with torch.no_grad():
            out = m(*xs)
        return out if isinstance(out, tuple) else (out,)

    fused = generate(dataclasses.replace(blk), env, runtime={"loader"})  # fresh: no memoised pass
    monkeypatch.setattr(pipeline, "PASSES", tuple(
        (n, (lambda t, **_kw: t) if n == "contraction_view" else s) for n, s in PASSES))
    plain = generate(dataclasses.replace(blk), env, runtime={"loader"})
    assert fused.source != plain.source
    assert fused.source.count("torch.diagonal(") < plain.source.count("torch.diagonal(")
    for a, b in zip(module(fused), module(plain), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
