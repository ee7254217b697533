"""``ir.affine``: the one normalisation of reindexings to affine maps (docs/format.md §7).

Every reindexing of the bundled spec and of both older pyncd examples, and random trees of
``Rearrangement`` / ``StrideMorphism`` / ``Block`` / ``ProductOfMorphisms`` / ``Composed``, are
checked against :func:`reference`, a direct evaluation of the morphism on one index tuple that
knows nothing of matrices (an out-of-range intermediate index of a composition is dead,
``interpreter/READINGS.md`` item 2). Hand-made cases pin ``win``, ``prefix``, ``before`` and a
composition whose intermediate index leaves its axis.
"""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import sympy

import ncdc
from ncdc.codegen import affine as codegen_affine
from ncdc.interpreter import reindex
from ncdc.ir.affine import BoundAffineMap, RangeConstraint, affine_map
from ncdc.ir.axes import RawAxis
from ncdc.ir.env import Env
from ncdc.ir.errors import SpecError
from ncdc.ir.morphisms import (
    Block,
    Broadcasted,
    Composed,
    ProductOfMorphisms,
    Rearrangement,
    StrideMorphism,
    StrideRow,
)
from ncdc.ir.names import Name
from ncdc.ir.numeric import FreeNumeric
from ncdc.ir.operators import ConcatenateAxes, CovariantView, DeconcatenateAxes
from ncdc.ir.walk import walk
from tests.conftest import ATTENTION_CORE, TRANSFORMER
from tests.oracles.ir_build import axis, block, composed, product, rearr, stride


# -- the reference: one index tuple at a time ------------------------------------------------
def _apply(m, idx: tuple[int, ...], env: Env) -> tuple[tuple[int, ...], bool]:
    """(codomain index, whether every intermediate index stayed inside its axis)."""
    if isinstance(m, Block):
        return _apply(m.body, idx, env)
    if isinstance(m, Rearrangement):
        return tuple(idx[k] for k in m.mapping), True
    if isinstance(m, StrideMorphism):
        return tuple(sum(env.size(s) * i for s, i in zip(r.strides, idx, strict=True)) + env.size(r.shift)
                     for r in m.rows), True
    if isinstance(m, ProductOfMorphisms):
        out, ok, at = (), True, 0
        for part in m.content:
            n = len(part.dom)
            got, part_ok = _apply(part, idx[at:at + n], env)
            out, ok, at = out + got, ok and part_ok, at + n
        return out, ok
    if isinstance(m, Composed):
        cur, ok = idx, True
        for k, part in enumerate(m.content):
            if k:
                ok = ok and _inside(cur, part.dom, env)
            cur, part_ok = _apply(part, cur, env)
            ok = ok and part_ok
        return cur, ok
    raise AssertionError(type(m).__name__)


def _inside(idx, axes, env: Env) -> bool:
    return all(0 <= i < env.size(a.size) for i, a in zip(idx, axes, strict=True))


def reference(m, idx, env: Env) -> tuple[tuple[int, ...], bool]:
    """(codomain index of ``m`` at ``idx``, live)."""
    out, ok = _apply(m, tuple(idx), env)
    return out, ok and _inside(out, m.cod, env)


def normalised(bound: BoundAffineMap, idx) -> tuple[tuple[int, ...], bool]:
    cod = tuple(sum(s * i for s, i in zip(row, idx, strict=True)) + b
                for row, b in zip(bound.rows, bound.shifts, strict=True))
    got = bound.apply(idx)
    assert got is None or got == cod
    return cod, got is not None


def agree(m, env: Env, indices) -> None:
    a = affine_map(m)
    assert a.dom == tuple(m.dom) and a.cod == tuple(m.cod)
    bound = a.bind(env)
    assert bound.dom_sizes == env.sizes(m.dom) and bound.cod_sizes == env.sizes(m.cod)
    for idx in indices:
        assert normalised(bound, idx) == reference(m, idx, env), (m.path, idx)


# -- every reindexing of the specs ----------------------------------------------------------
def reindexings(root):
    """Every distinct reindexing below ``root``: Broadcasted.reindexings, CovariantView's,
    ConcatenateAxes' / DeconcatenateAxes' parts."""
    seen, out = set(), []
    for site in walk(root):
        b = site.node
        if not isinstance(b, Broadcasted):
            continue
        found = list(b.reindexings)
        if isinstance(b.operator, CovariantView) and b.operator.reindexing is not None:
            found.append(b.operator.reindexing)
        if isinstance(b.operator, (ConcatenateAxes, DeconcatenateAxes)):
            found.extend(b.operator.part_reindexings)
        for r in found:
            if id(r) not in seen:
                seen.add(id(r))
                out.append(r)
    return out


@pytest.mark.parametrize("which", ["bundled", "transformer", "attention_core"])
def test_every_reindexing_of_the_specs_agrees_with_the_reference(which):
    spec = ncdc.load({"bundled": None, "transformer": TRANSFORMER,
                      "attention_core": ATTENTION_CORE}[which])
    env = spec.bind("tiny").env
    rng = np.random.default_rng(7)
    found = reindexings(spec.data)
    assert len(found) >= {"bundled": 300, "transformer": 20, "attention_core": 6}[which]
    kinds = set()
    for m in found:
        kinds.add(type(m).__name__)
        sizes = env.sizes(m.dom)
        corners = [tuple(0 for _ in sizes), tuple(n - 1 for n in sizes)]
        draws = [tuple(int(rng.integers(n)) for n in sizes) for _ in range(12)]
        agree(m, env, corners + draws if all(sizes) else [])
    if which == "bundled":
        assert {"Rearrangement", "StrideMorphism", "ProductOfMorphisms", "Block"} <= kinds


# -- random trees -----------------------------------------------------------------------------
def random_morphism(rnd: random.Random, dom: tuple, depth: int):
    """A random stride-category morphism with domain ``dom`` (tiny integer sizes)."""
    choice = rnd.choice(["rearr", "stride", "product", "composed", "block"] if depth else
                        ["rearr", "stride"])
    if choice == "rearr":
        mapping = [rnd.randrange(len(dom)) for _ in range(rnd.randint(0, 3))] if dom else []
        return rearr(mapping, *dom)
    if choice == "stride":
        cod = [axis(f"c{k}", rnd.randint(1, 4)) for k in range(rnd.randint(0, 3))]
        return stride(dom, [(c, [rnd.randint(-2, 2) for _ in dom], rnd.randint(-3, 3))
                            for c in cod])
    if choice == "product":
        cut = rnd.randint(0, len(dom))
        return product(random_morphism(rnd, dom[:cut], depth - 1),
                       random_morphism(rnd, dom[cut:], depth - 1))
    if choice == "composed":
        first = random_morphism(rnd, dom, depth - 1)
        return composed(first, random_morphism(rnd, tuple(first.cod), depth - 1))
    return block(random_morphism(rnd, dom, depth - 1), "win")


@pytest.mark.parametrize("seed", range(80))
def test_random_morphisms_agree_with_the_reference_everywhere(seed):
    rnd = random.Random(seed)
    dom = tuple(axis(f"d{k}", rnd.randint(1, 4)) for k in range(rnd.randint(0, 3)))
    m = random_morphism(rnd, dom, 3)
    env = Env()
    box = list(itertools.product(*(range(n) for n in env.sizes(dom))))
    agree(m, env, box)
    # the interpreter's numpy execution of the same map agrees too
    bound = reindex.affine_map(m, env)
    assert bound == affine_map(m).bind(env)
    sizes = bound.dom_sizes
    ok = reindex.ok_mask(bound)
    live = np.ones(sizes, bool) if ok is None else np.broadcast_to(ok, sizes)
    grids = [np.broadcast_to(g, sizes) for g in reindex.index_grids(bound)]
    for idx in box:
        cod, want = reference(m, idx, env)
        assert bool(live[idx]) == want
        assert tuple(int(g[idx]) for g in grids) == cod


# -- hand-made cases --------------------------------------------------------------------------
def test_window_reads_token_minus_slot_and_is_dead_before_token_zero():
    x, w, c = axis("x", 6), axis("w", 3), axis("c", 2)
    m = product(block(stride([x, w], [(x, [1, -1], 0)]), "win"), rearr([0], c))
    a = affine_map(m)
    assert a.rows == ((1, -1, 0), (0, 0, 1)) and a.shifts == (0, 0) and not a.constraints
    bound = a.bind(Env())
    for i, j, k in itertools.product(range(6), range(3), range(2)):
        assert bound.apply((i, j, k)) == ((i - j, k) if j <= i else None)
    assert bound.ranges == [(-2, 5), (0, 1)] and not bound.always_in_range


def test_prefix_has_a_symbolic_shift_bound_late():
    g_size = FreeNumeric(990_001, None)
    x, lp, lx = axis("x", 5), axis("L'", 2), axis("L", 3)
    g = RawAxis(990_002, Name("G"), g_size)
    rows = (StrideRow(lx, (sympy.Integer(1), sympy.Integer(1)), 1 - g_size),)
    m = product(rearr([0], x), block(StrideMorphism((g, lp), rows), "prefix"))
    a = affine_map(m)
    assert a.rows == ((1, 0, 0), (0, 1, 1)) and a.shifts == (0, 1 - g_size)
    env = Env({g_size: 3})
    bound = a.bind(env)
    assert bound.dom_sizes == (5, 3, 2) and bound.shifts == (0, -2)
    for t, i, j in itertools.product(range(5), range(3), range(2)):
        want = (t, i + j - 2) if i + j >= 2 else None
        assert bound.apply((t, i, j)) == want
    agree(m, env, itertools.product(range(5), range(3), range(2)))


def test_before_reads_the_earlier_slots_only():
    gk, gk2 = axis("GK", 6), axis("GK'", 6)
    m = block(stride([gk, gk2], [(gk, [1, 1], -6)]), "before")
    bound = affine_map(m).bind(Env())
    for a, b in itertools.product(range(6), range(6)):
        assert bound.apply((a, b)) == ((a + b - 6,) if a + b >= 6 else None)


def test_an_intermediate_index_out_of_range_makes_the_position_dead():
    x, y, z = axis("x", 4), axis("y", 4), axis("z", 4)
    m = composed(stride([x], [(y, [1], 2)]), stride([y], [(z, [1], -2)]))
    a = affine_map(m)
    assert a.rows == ((1,),) and a.shifts == (0,)
    assert a.constraints == (RangeConstraint((1,), 2, y),)
    bound = a.bind(Env())
    assert [bound.apply((i,)) for i in range(4)] == [(0,), (1,), None, None]
    assert not bound.constraints_in_range and not bound.always_in_range
    # the code generator cannot emit that check, so it refuses rather than read it live
    with pytest.raises(SpecError, match="intermediate index"):
        codegen_affine.affine_map(m)


def test_composing_through_relabellings_adds_no_constraint():
    a_, b_ = axis("a", 3), axis("b", 4)
    w = axis("w", 5)
    m = composed(rearr([1, 0], a_, b_), rearr([1, 0], b_, a_),
                 product(stride([a_], [(w, [1], 1)]), rearr([0], b_)))
    a = affine_map(m)
    assert a.rows == ((1, 0), (0, 1)) and a.shifts == (1, 0) and not a.constraints
    cg = codegen_affine.affine_map(m)
    assert cg.rows == a.rows and cg.shifts == a.shifts
    agree(m, Env(), itertools.product(range(3), range(4)))


def test_nested_constraints_are_pulled_back_and_widened():
    x, y, z, u = axis("x", 3), axis("y", 2), axis("z", 5), axis("u", 5)
    inner = composed(stride([x], [(y, [1], 0)]), stride([y], [(z, [2], 1)]))
    m = composed(product(rearr([0], u), inner), stride([u, z], [(u, [1, -1], 2)]))
    a = affine_map(m)
    # y = x must stay below 2; z = 2x + 1 below 5; u is copied onto itself (no constraint)
    assert [(c.row, c.shift, c.axis) for c in a.constraints] == [((0, 1), 0, y), ((0, 2), 1, z)]
    agree(m, Env(), itertools.product(range(5), range(3)))


def test_malformed_reindexings_are_spec_errors():
    x, y = axis("x", 2), axis("y", 2)
    with pytest.raises(SpecError, match="strides"):
        affine_map(stride([x, y], [(x, [1], 0)]))
    with pytest.raises(SpecError, match="empty composition"):
        affine_map(Composed(()))
    with pytest.raises(SpecError, match="do not join"):
        affine_map(composed(rearr([0], x), rearr([0, 0], x, y)))
    with pytest.raises(SpecError, match="cannot be used as a reindexing"):
        affine_map(sympy.Integer(1))
