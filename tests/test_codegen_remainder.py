"""Generated code for the forms of docs/format.md §14.3 (compressor, indexer, entry selection,
attention over ``w|x + s|x``), each on a small hand-made term whose inputs reach the form with
dead positions, checked against the reference interpreter in exact and emulate mode with the
comparison ``ncdc check`` uses (:func:`ncdc.verify.check.check_morphism`)."""
from __future__ import annotations

import itertools

import pytest
import sympy

from ncdc.codegen import generate
from ncdc.ir import (
    ConcatenateAxes,
    CovariantView,
    DeconcatenateAxes,
    IndexSelect,
    Select,
    SelectionForm,
    SpecError,
    TopK,
    View,
)
from ncdc.ir.axes import AffineSparseAxis, ConcatenatedAxis, SparseAxis
from ncdc.ir.env import Env
from ncdc.ir.names import Name
from ncdc.verify.check import check_morphism
from tests.oracles.ir_build import (
    Q,
    R,
    array,
    axis,
    bc,
    composed,
    nat,
    product,
    rearr,
    stride,
    weave,
)

ENV = Env()
_UIDS = itertools.count(950_000)
MODES = ["exact", "emulate"]


def _agrees(m, quant, seeds=3):
    r = check_morphism(m, ENV, quant=quant, seeds=seeds)
    assert r.ok, r.problem


def _window(x, w, dt=R):
    """``R[x] -> R[x, w|x]``: the token ``x - w``, dead before token 0 (as ``w|x`` is)."""
    return bc(View(Name("win")), [weave(dt, "*")], [weave(dt, "*", "*")],
              [stride([x, w], [(x, [1, -1], 0)])])



# -- ConcatenateAxes / DeconcatenateAxes --------------------------------------------------------
def _concat_term(offsets, whole_n, out_dt=R, x=None, c=None, w=None, s=None):
    x, w, s = x or axis("x", 5), w or axis("w", 3), s or axis("s", 2)
    c = c or axis("c", whole_n)
    cat = bc(ConcatenateAxes(Name("cat"), part_reindexings=(
        stride([w], [(c, [1], offsets[0])]), stride([s], [(c, [1], offsets[1])]))),
        [weave(R, "*", w), weave(R, "*", s)], [weave(out_dt, "*", c)],
        [rearr([0], x), rearr([0], x)])
    return composed(product(_window(x, w), rearr([0], array(R, x, s))), cat)


@pytest.mark.parametrize("quant", MODES)
@pytest.mark.parametrize("offsets,whole_n", [((0, 3), 5), ((1, 5), 8), ((-1, 4), 5)],
                         ids=["tiled", "gaps", "outside"])
def test_concatenate_parts_with_dead_positions(quant, offsets, whole_n):
    _agrees(_concat_term(offsets, whole_n, Q("BF16")), quant)


@pytest.mark.parametrize("quant", MODES)
def test_deconcatenate_parts_reading_dead_and_outside_positions(quant):
    x, c = axis("x", 5), axis("c", 5)
    a, b, d = axis("a", 3), axis("b", 3), axis("d", 2)
    cut = bc(DeconcatenateAxes(Name("cut"), part_reindexings=(
        stride([a], [(c, [1], 0)]), stride([b], [(c, [1], 3)]), stride([d], [(c, [2], 1)]))),
        [weave(R, "*", c)], [weave(Q("BF16"), "*", a), weave(R, "*", b), weave(R, "*", d)],
        [rearr([0], x)])
    _agrees(composed(_concat_term((0, 3), 5, x=x, c=c), cut), quant)


def test_attention_slots_w_x_plus_s_x_onto_a_concatenated_axis_and_back():
    """The §14.3 slot axis: ``w|x`` (dead before token 0) and ``s|x`` laid end to end."""
    x = axis("x", 5)
    w = AffineSparseAxis(next(_UIDS), Name("w|x"), sympy.Integer(3), guides=(x,),
                         guide_strides=(sympy.Integer(1),), stride=sympy.Integer(-1))
    s = AffineSparseAxis(next(_UIDS), Name("s|x"), sympy.Integer(2), guides=(x,),
                         guide_strides=(sympy.Integer(0),))
    c = ConcatenatedAxis(next(_UIDS), None, sympy.Integer(5), parts=(w, s))
    cut = bc(DeconcatenateAxes(Name("cut"), part_reindexings=(
        stride([w], [(c, [1], 0)]), stride([s], [(c, [1], 3)]))),
        [weave(R, "*", c)], [weave(R, "*", w), weave(Q("BF16"), "*", s)], [rearr([0], x)])
    for quant in MODES:
        _agrees(_concat_term((0, 3), 5, Q("BF16"), x=x, c=c, w=w, s=s), quant)
        _agrees(composed(_concat_term((0, 3), 5, x=x, c=c, w=w, s=s), cut), quant)


# -- IndexSelect / Select with positions as data ------------------------------------------------
def _shifted(x, dt, *rest):
    """``dt[x, rest...] -> dt[x, rest...]`` read at ``x - 1``: dead at token 0."""
    stars = ["*"] * (1 + len(rest))
    return bc(View(Name("prev")), [weave(dt, *stars)], [weave(dt, *stars)],
              [stride([x, *rest], [(x, [1] + [0] * len(rest), -1)]
                      + [(a, [0] * i + [1] + [0] * (len(rest) - i), 0)
                         for i, a in enumerate(rest, start=1)])])


@pytest.mark.parametrize("quant", MODES)
@pytest.mark.parametrize("dead_index", [False, True])
def test_index_select_from_a_payload_with_dead_entries(quant, dead_index):
    x, w = axis("x", 5), axis("w", 3)
    index = _shifted(x, nat(3)) if dead_index else rearr([0], array(nat(3), x))
    pick = bc(IndexSelect(Name("pick")), [weave(nat(3), "*"), weave(R, "*", w)],
              [weave(Q("BF16"), "*")], [rearr([0], x), rearr([0], x)])
    _agrees(composed(product(index, _window(x, w)), pick), quant)


@pytest.mark.parametrize("quant", MODES)
@pytest.mark.parametrize("weighted", [False, True])
def test_select_with_positions_as_data(quant, weighted):
    x, w, k = axis("x", 5), axis("w", 3), axis("k", 4)
    ins = [weave(nat(3), "*", k), weave(R, "*", w)]
    parts = [_shifted(x, nat(3), k), _window(x, w)]
    if weighted:
        ins = [weave(R, "*", k)] + ins
        parts = [rearr([0], array(R, x, k))] + parts
    sel = bc(Select(Name("sel")), ins, [weave(Q("BF16"), "*", k)], [rearr([0], x)] * len(ins))
    _agrees(composed(product(*parts), sel), quant)


# -- TopK, dense-k forms -------------------------------------------------------------------------
def _tied_scores(x, w, e):
    """``R[x] -> R[x, e]``: the window ``w|x`` twice along ``e`` (every live score tied with
    the one ``|w|`` later; dead before token 0)."""
    n = w.size
    cat = bc(ConcatenateAxes(Name("twice"), part_reindexings=(
        stride([w], [(e, [1], 0)]), stride([w], [(e, [1], n)]))),
        [weave(R, "*", w), weave(R, "*", w)], [weave(R, "*", e)], [rearr([0], x)] * 2)
    return composed(_window(x, w), rearr([0, 0], array(R, x, w)), cat)


@pytest.mark.parametrize("quant", MODES)
@pytest.mark.parametrize("form", [SelectionForm.WEIGHTS_SELECT, SelectionForm.ONLY_WEIGHTS,
                                  SelectionForm.ONLY_SELECTION])
@pytest.mark.parametrize("k_n", [3, 7])
def test_dense_topk_forms_in_position_order_ties_low(quant, form, k_n):
    x, w, e, k = axis("x", 5), axis("w", 3), axis("e", 6), axis("k", k_n)
    outs = {SelectionForm.WEIGHTS_SELECT: [weave(Q("BF16"), "*", k), weave(nat(6), "*", k)],
            SelectionForm.ONLY_WEIGHTS: [weave(Q("BF16"), "*", k)],
            SelectionForm.ONLY_SELECTION: [weave(nat(6), "*", k)]}[form]
    top = bc(TopK(Name("top"), k=sympy.Integer(k_n), form=form), [weave(R, "*", e)], outs,
             [rearr([0], x)])
    _agrees(composed(_tied_scores(x, w, e), top), quant)


@pytest.mark.parametrize("quant", MODES)
def test_weights_topk_keeps_the_lower_position_on_ties(quant):
    x, w, e = axis("x", 5), axis("w", 3), axis("e", 6)
    ke = SparseAxis(next(_UIDS), Name("k/e"), sympy.Integer(6), activity=sympy.Integer(2))
    top = bc(TopK(Name("top"), k=sympy.Integer(2), form=SelectionForm.WEIGHTS),
             [weave(R, "*", e)], [weave(Q("FP32"), "*", ke)], [rearr([0], x)])
    _agrees(composed(_tied_scores(x, w, e), top), quant)


@pytest.mark.parametrize("quant", MODES)
def test_dense_topk_reports_positions_held_as_data(quant):
    x, w, e, k = axis("x", 5), axis("w", 3), axis("e", 6), axis("k", 3)
    top = bc(TopK(Name("top"), k=sympy.Integer(3), form=SelectionForm.WEIGHTS_SELECT),
             [weave(R, "*", e), weave(nat(9), "*", e)],
             [weave(R, "*", k), weave(nat(9), "*", k)], [rearr([0], x), rearr([0], x)])
    _agrees(composed(product(_tied_scores(x, w, e), rearr([0], array(nat(9), x, e))), top),
            quant)


# -- composed reindexings whose intermediate index can leave its axis ---------------------------
@pytest.mark.parametrize("quant", MODES)
def test_composed_read_kills_positions_whose_intermediate_index_leaves(quant):
    x, y, z = axis("x", 4), axis("y", 4), axis("z", 4)
    # x -> y = x + 2 (off the axis for x >= 2), then y -> z = y - 2 (back in range)
    rx = composed(stride([x], [(y, [1], 2)]), stride([y], [(z, [1], -2)]))
    m = bc(View(Name("v")), [weave(R, "*")], [weave(Q("BF16"), "*")], [rx])
    _agrees(m, quant)


@pytest.mark.parametrize("quant", MODES)
def test_composed_window_read_with_a_constraint_on_two_degree_dims(quant):
    x, w, c, y = axis("x", 6), axis("w", 3), axis("c", 2), axis("y", 6)
    # (x, w, c) -> x - w (dead before token 0), then + 1: the final index alone would be live
    rx = product(composed(stride([x, w], [(x, [1, -1], 0)]), stride([x], [(y, [1], 1)])),
                 rearr([0], c))
    m = bc(View(Name("win")), [weave(R, "*", "*")], [weave(R, "*", "*", "*")], [rx])
    _agrees(m, quant)


def test_a_scatter_through_such_a_composition_is_still_refused_with_its_form():
    x, y, z = axis("x", 4), axis("y", 4), axis("z", 4)
    rx = composed(stride([x], [(y, [1], 2)]), stride([y], [(z, [1], -2)]))
    m = bc(CovariantView(Name("spread"), reindexing=rx), [weave(R, x)], [weave(R, z)],
           [rearr([])])
    with pytest.raises(SpecError, match="composed reindexing whose intermediate index"):
        generate(m, ENV)
