"""Evaluation semantics on small hand-built terms: reindexings as affine gathers with dead
out-of-range reads, liveness through folds, sums and products, covariant scatters, selections,
boxes, repetition and the tape (docs/format.md §2.4, §7–§11, §16)."""
from __future__ import annotations

import numpy as np
import pytest
import sympy

from ncdc import interpreter
from ncdc.interpreter import reindex
from ncdc.interpreter.reindex import GatherPlan, affine_map, gather
from ncdc.interpreter.values import Value
from ncdc.ir import (
    FREE_INPUT,
    AdditionOp,
    Arithmetic,
    BitwiseXor,
    BlockOperator,
    CovariantView,
    Drop,
    Einops,
    Elementwise,
    Embedding,
    EvaluationError,
    Grab,
    L1Norm,
    Linear,
    Maximum,
    Normalize,
    ParaWrap,
    Select,
    SelectionForm,
    TapeSlot,
    TopK,
    View,
)
from ncdc.ir.env import Env
from ncdc.ir.names import Name
from tests.oracles.ir_build import (
    R,
    array,
    axis,
    bc,
    block,
    composed,
    nat,
    product,
    rearr,
    stride,
    weave,
)

ENV = Env()


def run(m, *inputs, **kw):
    return interpreter.interpret(m, ENV, **kw).evaluate(*inputs)


def window_view(n_tok=6, n_win=3, width=2):
    x, w, c = axis("x", n_tok), axis("w", n_win), axis("c", width)
    rx = product(block(stride([x, w], [(x, [1, -1], 0)]), "win"), rearr([0], c))
    return bc(View(Name("win")), [weave(R, "*", "*")], [weave(R, "*", "*", "*")], [rx]), (x, w, c)


def test_window_reads_are_dead_before_token_zero():
    v, _ = window_view()
    k = np.arange(12.0).reshape(6, 2) + 1
    (out,) = run(v, k).outputs
    idx = np.arange(6)[:, None] - np.arange(3)[None, :]
    live = idx >= 0
    assert np.array_equal(out.live, np.broadcast_to(live[..., None], (6, 3, 2)))
    want = np.where(live[..., None], k[np.clip(idx, 0, None)], 0.0)
    assert np.array_equal(out.values, want)


def test_window_gather_is_a_strided_view_not_a_copy():
    v, _ = window_view(n_tok=50, n_win=8, width=4)
    plan = GatherPlan(affine_map(v.reindexings[0], ENV), (0, 1), (), ())
    k = np.random.default_rng(0).standard_normal((50, 4))
    got = gather(Value(k), plan, 0)
    assert got.values.shape == (50, 8, 4)
    assert not got.values.flags.owndata and not got.values.flags.writeable
    base = got.values.base
    while getattr(base, "base", None) is not None:
        base = base.base
    assert base.size == (50 + 7) * 4          # the source padded once, not tokens x window
    assert got.live.shape == (50, 8, 1)


def test_indexed_fallback_agrees_with_the_strided_read(monkeypatch):
    v, _ = window_view(n_tok=7, n_win=4, width=3)
    k = np.random.default_rng(1).standard_normal((7, 3))
    strided = run(v, k).outputs[0]
    monkeypatch.setattr(reindex, "PAD_FACTOR", -1)
    monkeypatch.setattr(reindex, "PAD_SLACK", -1)
    indexed = run(v, k).outputs[0]
    assert np.array_equal(strided.values, indexed.values)
    assert np.array_equal(strided.live, indexed.live)


def test_rearrangement_reindexing_copies_drops_and_permutes():
    a, b = axis("a", 3), axis("b", 4)
    # degree (a, b, a'): input [a, b] read as in[i_b?]: mapping [2, 1] -> (a', b); a dropped
    a2 = axis("a2", 3)
    m = bc(View(Name("v")), [weave(R, "*", "*")], [weave(R, "*", "*", "*")],
           [rearr([2, 1], a, b, a2)])
    X = np.arange(12.0).reshape(3, 4)
    (out,) = run(m, X).outputs
    assert out.values.shape == (3, 4, 3)
    assert np.array_equal(out.values, np.broadcast_to(X.T[None], (3, 4, 3)))
    # a diagonal: degree (a,), input [a, a] read at (i, i)
    d = bc(View(Name("diag")), [weave(R, "*", "*")], [weave(R, "*")], [rearr([0, 0], a)])
    Y = np.arange(9.0).reshape(3, 3)
    assert np.array_equal(run(d, Y).outputs[0].values, np.diag(Y))


def test_composed_reindexing_checks_intermediate_indices():
    x, y, z = axis("x", 4), axis("y", 4), axis("z", 4)
    # x -> y = x + 2 (out of range for x >= 2), then y -> z = y - 2 (back in range)
    rx = composed(stride([x], [(y, [1], 2)]), stride([y], [(z, [1], -2)]))
    m = bc(View(Name("v")), [weave(R, "*")], [weave(R, "*")], [rx])
    (out,) = run(m, np.arange(4.0) + 10).outputs
    assert np.array_equal(out.live, [True, True, False, False])
    assert np.array_equal(out.values, [10.0, 11.0, 0.0, 0.0])


def _partly_dead():
    """A Value on [x=4] with positions 1 and 3 dead (through a view reading x+1 of a 3-axis)."""
    return (np.array([1.0, 2.0, 3.0, 4.0]), np.array([True, False, True, False]))


def test_addition_counts_a_dead_operand_as_zero():
    x = axis("x", 4)
    m = bc(AdditionOp(Name("+")), [weave(R, "*"), weave(R, "*")], [weave(R, "*")],
           [rearr([0], x), rearr([0], x)])
    a = (np.array([1.0, 2.0, 3.0, 4.0]), np.array([True, False, True, False]))
    b = (np.array([10.0, 20.0, 30.0, 40.0]), np.array([True, True, False, False]))
    (out,) = run(m, a, b).outputs
    assert np.array_equal(out.values, [11.0, 20.0, 3.0, 0.0])
    assert np.array_equal(out.live, [True, True, True, False])


def test_products_propagate_dead_and_folds_skip_it():
    x, c = axis("x", 3), axis("c", 2)
    prod = bc(Einops(Name("e"), signature=((), ())), [weave(R, "*"), weave(R, "*")],
              [weave(R, "*")], [rearr([0], x), rearr([0], x)])
    a = (np.array([1.0, 2.0, 3.0]), np.array([True, False, True]))
    b = (np.array([5.0, 6.0, 7.0]), np.array([True, True, False]))
    (out,) = run(prod, a, b).outputs
    assert np.array_equal(out.live, [True, False, False])
    assert np.array_equal(out.values, [5.0, 0.0, 0.0])
    dot = bc(Einops(Name("e"), signature=((0,), (0,))), [weave(R, "*", c), weave(R, "*", c)],
             [weave(R, "*")], [rearr([0], x), rearr([0], x)])
    A = (np.ones((3, 2)), np.array([[True, False], [False, False], [True, True]]))
    B = np.full((3, 2), 2.0)
    (out,) = run(dot, A, B).outputs
    assert np.array_equal(out.values, [2.0, 0.0, 4.0])
    assert np.array_equal(out.live, [True, False, True])        # all-dead fold is dead


def test_maximum_xor_and_normalisations_use_live_terms_only():
    x, c = axis("x", 2), axis("c", 4)
    X = np.array([[1.0, -5.0, 3.0, 9.0], [2.0, 2.0, 2.0, 2.0]])
    L = np.array([[True, True, True, False], [False, False, False, False]])
    mx = bc(Maximum(Name("max")), [weave(R, "*", c)], [weave(R, "*")], [rearr([0], x)])
    (out,) = run(mx, (X, L)).outputs
    assert np.array_equal(out.values, [3.0, 0.0]) and np.array_equal(out.live, [True, False])
    norm = bc(Normalize(Name("RMSNorm"), epsilon=sympy.Integer(0)), [weave(R, "*", c)],
              [weave(R, "*", c)], [rearr([0], x)])
    (out,) = run(norm, (X, L)).outputs
    rms = np.sqrt(np.mean(np.array([1.0, -5.0, 3.0]) ** 2))     # mean over the 3 live terms
    assert np.allclose(out.values[0, :3], X[0, :3] / rms, rtol=1e-14)
    assert not out.live[1].any() and out.values[0, 3] == 0
    l1 = bc(L1Norm(Name("L1"), epsilon=sympy.Integer(0)), [weave(R, "*", c)],
            [weave(R, "*", c)], [rearr([0], x)])
    (out,) = run(l1, (X, L)).outputs
    assert np.allclose(out.values[0, :3], X[0, :3] / -1.0)
    n = nat(2**63)
    xor = bc(BitwiseXor(Name("xor")), [weave(n, "*", c)], [weave(n, "*")], [rearr([0], x)])
    Xi = np.array([[1, 2, 4, 8], [3, 3, 3, 3]])
    (out,) = run(xor, (Xi, L)).outputs
    assert out.values.tolist() == [7, 0] and out.live.tolist() == [True, False]


def test_nullary_covariant_view_writes_one_at_its_image():
    x, n = axis("x", 3), axis("n", 4)
    a0 = bc(CovariantView(Name("A^0"), reindexing=stride([], [(n, [], 0)])), [],
            [weave(R, "*", n)], [], backup=[x])
    (out,) = run(a0).outputs
    want_live = np.zeros((3, 4), bool)
    want_live[:, 0] = True
    assert np.array_equal(out.live, want_live)
    assert np.array_equal(out.values, want_live.astype(float))


def test_covariant_view_scatters_and_leaves_the_rest_dead():
    e, y, c = axis("e", 2), axis("y", 2), axis("c", 6)
    rx = stride([e, y], [(c, [3, 1], 1)])      # (e, y) -> 3e + y + 1 : 1, 2, 4, 5
    m = bc(CovariantView(Name("grp"), reindexing=rx), [weave(R, e, y)], [weave(R, c)],
           [rearr([])])
    (out,) = run(m, np.array([[1.0, 2.0], [3.0, 4.0]])).outputs
    assert out.values.tolist() == [0.0, 1.0, 2.0, 0.0, 3.0, 4.0]
    assert out.live.tolist() == [False, True, True, False, True, True]


def test_topk_keeps_k_live_values_in_place():
    e = axis("e", 5)
    top = bc(TopK(Name("TopK"), k=sympy.Integer(2), form=SelectionForm.WEIGHTS),
             [weave(R, e)], [weave(R, e)], [rearr([])])
    s = np.array([0.5, 3.0, -1.0, 3.0, 2.0])
    (out,) = run(top, s).outputs
    assert out.live.tolist() == [False, True, False, True, False]   # tie: both 3.0 kept
    assert out.values.tolist() == [0.0, 3.0, 0.0, 3.0, 0.0]
    (out,) = run(top, (s, np.array([True, False, False, False, False]))).outputs
    assert out.live.tolist() == [True, False, False, False, False]  # fewer live than k
    sel = bc(Select(Name("Select")), [weave(R, e), weave(R, e)], [weave(R, e)],
             [rearr([]), rearr([])])
    (out,) = run(sel, (np.array([0, 2.0, 0, 4.0, 0]), np.array([0, 1, 0, 1, 0], bool)),
                 np.arange(5.0)).outputs
    assert out.values.tolist() == [0.0, 2.0, 0.0, 12.0, 0.0]


def test_dense_topk_forms_are_in_position_order():
    e, k = axis("e", 5), axis("k", 2)
    top = bc(TopK(Name("TopK"), k=sympy.Integer(2), form=SelectionForm.WEIGHTS_SELECT),
             [weave(R, e)], [weave(R, k), weave(nat(5), k)], [rearr([])])
    vals, pos = run(top, np.array([0.5, 1.0, 9.0, 3.0, 2.0])).outputs
    assert pos.values.tolist() == [2, 3] and vals.values.tolist() == [9.0, 3.0]


def test_box_runs_its_block_lifted_over_the_degree():
    x, m, o = axis("x", 3), axis("m", 2), axis("o", 2)
    inner = block(bc(Linear(Name("W"), bias=True), [weave(R, m)], [weave(R, o)], [rearr([])]),
                  "Inner")
    box = bc(BlockOperator(Name("box"), block=inner), [weave(R, "*", m)], [weave(R, "*", o)],
             [rearr([0], x)])
    W = np.array([[1.0, 2.0], [3.0, 4.0]])
    b = np.array([0.5, -0.5])
    X = np.arange(6.0).reshape(3, 2)
    r = interpreter.interpret(box, ENV, params={"Inner/W.weight": W, "Inner/W.bias": b})
    assert np.allclose(r(X)[0], X @ W + b, rtol=0, atol=1e-14)


def test_repeated_block_has_parameters_per_iteration():
    m = axis("m", 2)
    lin = bc(Linear(Name("W")), [weave(R, m)], [weave(R, m)], [rearr([])])
    rep = block(lin, "Layer", repetition=3)
    specs = interpreter.interpret(rep, ENV).param_specs
    assert [s.key for s in specs] == [f"Layer@{i}/W.weight" for i in range(3)]
    Ws = [np.eye(2) * (i + 2) for i in range(3)]
    r = interpreter.interpret(rep, ENV, params={f"Layer@{i}/W.weight": Ws[i] for i in range(3)})
    assert np.allclose(r(np.ones(2))[0], np.ones(2) * 2 * 3 * 4)


def test_tape_grab_and_drop():
    x = axis("x", 3)
    arr = array(nat(10), x)
    slot = TapeSlot(4242, Name("ids"))
    write = ParaWrap(rearr_arrays([0], arr), (None,), (slot,))
    read = ParaWrap(rearr_arrays([0], arr), (slot,), (None,))
    m = composed(write, read)
    res = run(m, np.array([1, 2, 3]))
    assert res.outputs[0].values.tolist() == [1, 2, 3]
    assert res.tape[4242].values.tolist() == [1, 2, 3]
    with pytest.raises(EvaluationError, match="ids"):
        run(read)
    assert run(composed(Grab(slot, arr)), tape={"ids": np.array([4, 5, 6])}) is not None
    r = interpreter.interpret(composed(Drop(slot, arr)), ENV).evaluate(np.array([7, 8, 9]))
    assert r.tape[4242].values.tolist() == [7, 8, 9]


def rearr_arrays(mapping, *arrays):
    from ncdc.ir import Rearrangement

    return Rearrangement(tuple(mapping), tuple(arrays))


def test_arithmetic_formula_constants_and_dead_lanes():
    x = axis("x", 3)
    f = Arithmetic(Name("f"), formula=sympy.log(FREE_INPUT) / sympy.log(2))
    m = bc(f, [weave(R, "*")], [weave(R, "*")], [rearr([0], x)])
    (out,) = run(m, (np.array([8.0, 0.0, 0.25]), np.array([True, False, True]))).outputs
    assert out.values.tolist() == [3.0, 0.0, -2.0]           # log2 exact; dead lane stays 0


def test_errors_are_typed_and_located():
    x = axis("x", 3)
    emb = bc(Embedding(Name("E")), [weave(nat(4), "*")], [weave(R, "*", axis("m", 2))],
             [rearr([0], x)])
    r = interpreter.interpret(emb, ENV, params={"E.table": np.zeros((4, 2))})
    with pytest.raises(EvaluationError, match=r"outside its type"):
        r(np.array([0, 7, 1]))
    with pytest.raises(EvaluationError, match=r"E.table.*expected \(4, 2\)"):
        interpreter.interpret(emb, ENV, params={"E.table": np.zeros((3, 2))})
    with pytest.raises(EvaluationError, match=r"missing parameter 'E.table'.*\(4, 2\)"):
        interpreter.interpret(emb, ENV, params={})
    with pytest.raises(EvaluationError, match="shape"):
        r(np.zeros(4, dtype=int))
    unknown = bc(Elementwise(Name("??"), function="unknown"), [weave(R, "*")], [weave(R, "*")],
                 [rearr([0], x)])
    with pytest.raises(EvaluationError, match="unknown") as exc:
        run(unknown, np.zeros(3))
    assert exc.value.json_path == unknown.path


def test_embedding_index_beyond_the_table_names_key_and_index():
    x, m = axis("x", 2), axis("m", 2)
    emb = bc(Embedding(Name("E")), [weave(nat(4), "*")], [weave(R, "*", m)], [rearr([0], x)])
    r = interpreter.interpret(emb, ENV, params={"E.table": np.zeros((4, 2))})
    # a natural inside its type but beyond a (user-supplied, too short) table
    r.params["E.table"] = np.zeros((2, 2))
    with pytest.raises(EvaluationError, match=r"index 3 is outside the table 'E.table' of 2"):
        r(np.array([0, 3]))


@pytest.mark.slow
def test_evaluation_is_deterministic(bundled):
    b = bundled.bind("tiny")
    pre = interpreter.prefix(bundled.data)
    xs = interpreter.random_inputs(pre, b.env, 3)
    one = interpreter.interpret(pre, b.env, stand_in=True, seed=5)(*xs)
    two = interpreter.interpret(pre, b.env, stand_in=True, seed=5)(*xs)
    three = interpreter.interpret(pre, b.env, stand_in=True, seed=5)(*xs)
    for a, b_, c in zip(one, two, three, strict=True):
        assert a.tobytes() == b_.tobytes() == c.tobytes()


def test_every_operator_kind_has_a_rule():
    from ncdc.ir.operators import ALL_OPERATORS

    missing = [c.__name__ for c in ALL_OPERATORS if c not in interpreter.RULES]
    assert not missing
    assert all(callable(f) for f in interpreter.RULES.values())


def test_public_entry_point_binds_sizes_by_name(bundled):
    import ncdc

    blk = bundled.block("Mixing Coefficients")
    run = ncdc.interpret(blk, sizes={"m": 32}, constants={r"\varepsilon_{hc}": 1e-3})
    assert run.dom_shapes() == [(4, 32)]
    pre, _post, comb = run(np.ones((4, 32)))
    assert np.allclose(comb.sum(0), 1, atol=1e-2) and np.all(pre > 1e-3)


def test_deeply_nested_terms_evaluate():
    x = axis("x", 2)
    m = bc(Arithmetic(Name("f"), formula=FREE_INPUT + 1), [weave(R, "*")], [weave(R, "*")],
           [rearr([0], x)])
    for i in range(400):          # deeper than a decoded spec may nest (MAX_DEPTH 600)
        m = block(composed(m), f"level {i}") if i % 2 else composed(m)
    (out,) = interpreter.interpret(m, ENV)(np.zeros(2))
    assert out.tolist() == [1.0, 1.0]


def test_index_select_and_position_forms_of_select():
    from ncdc.ir import IndexSelect

    x, n, k = axis("x", 3), axis("n", 4), axis("k", 2)
    isel = bc(IndexSelect(Name("IS")), [weave(nat(4), "*"), weave(R, n)], [weave(R, "*")],
              [rearr([0], x), rearr([], x)])
    payload = np.array([10.0, 11.0, 12.0, 13.0])
    (out,) = run(isel, (np.array([3, 0, 2]), np.array([True, False, True])), payload).outputs
    assert out.values.tolist() == [13.0, 0.0, 12.0] and out.live.tolist() == [True, False, True]
    gather_sel = bc(Select(Name("S")), [weave(nat(4), k), weave(R, n)], [weave(R, k)],
                    [rearr([]), rearr([])])
    (out,) = run(gather_sel, np.array([2, 1]), payload).outputs
    assert out.values.tolist() == [12.0, 11.0]
    wsel = bc(Select(Name("S")), [weave(R, k), weave(nat(4), k), weave(R, n)], [weave(R, k)],
              [rearr([]), rearr([]), rearr([])])
    (out,) = run(wsel, np.array([2.0, -1.0]), np.array([0, 3]), payload).outputs
    assert out.values.tolist() == [20.0, -13.0]


def test_yarn_rotary_table_follows_its_formula():
    from ncdc.ir import YarnRotary

    x, t = axis("x", 5), axis("t", 8)
    op = YarnRotary(Name("RoPE"), base=sympy.Integer(160000), position_stride=sympy.Integer(2),
                    factor=sympy.Integer(16), ramp_start=sympy.Integer(2),
                    ramp_end=sympy.Integer(6))
    from tests.oracles.ir_build import C, Q

    m = bc(op, [], [weave(C(Q("FP32")), x, t)], [], backup=[])
    (out,) = run(m).outputs
    ti = np.arange(8)
    theta = 160000.0 ** (-ti / 8)
    r = np.clip((ti - 2) / 4, 0, 1)
    theta = theta * (1 - r + r / 16)
    want = np.exp(1j * 2 * np.arange(5)[:, None] * theta[None, :])
    assert np.allclose(out.values, want, rtol=1e-13, atol=1e-15)


def test_unknown_generic_operator_is_an_error():
    from ncdc.ir import GenericOperator

    x = axis("x", 2)
    m = bc(GenericOperator(Name(r"\mathrm{mystery}")), [weave(R, "*")], [weave(R, "*")],
           [rearr([0], x)])
    with pytest.raises(EvaluationError, match="mystery"):
        run(m, np.zeros(2))
    ceil = bc(GenericOperator(Name(r"\lceil x \rceil")), [weave(R, "*")], [weave(R, "*")],
              [rearr([0], x)])
    assert run(ceil, np.array([-1.5, 2.1])).outputs[0].values.tolist() == [-1.0, 3.0]
