"""pyncd's ``Scan`` (one state): ``H_0 = base(X)``, ``H_{l+1} = step(H_l, U[..., l])``, the
history ``[H_0 .. H_N]`` stacked last. Decoded from nodes written as pyncd writes them, typed,
costed, and run by both backends against recurrences written out in numpy."""
from __future__ import annotations

import numpy as np
import pytest

import ncdc
from ncdc.codegen import compile_torch
from ncdc.ir.cost import cost
from ncdc.ir.incremental import analyse
from ncdc.ir.morphisms import CoupledScan, Scan
from tests.conftest import DATA, SpecMaker
from tests.lazy import torch


def _affine_scan(mk, n=4, b_size=3, wrap=True, axis_name="l"):
    """``H_0 = x``; ``H_{l+1} = A[:, l] · H_l + B[:, l]`` over ``b`` (a selective scan as in
    Mamba, diagonal state)."""
    b = mk.axis("b", b_size)
    ell = mk.axis(axis_name, n)
    arr = mk.array([b])
    times = mk.bc(mk.op("Einops", "einops", signature=[[], []]),
                  [mk.weave(["*"]), mk.weave(["*"])], [mk.weave(["*"])],
                  [mk.rearr([0], [b]), mk.rearr([0], [b])])
    plus = mk.bc(mk.op("AdditionOp", "+", part_of_fma=False),
                 [mk.weave(["*"]), mk.weave(["*"])], [mk.weave(["*"])],
                 [mk.rearr([0], [b]), mk.rearr([0], [b])])
    step = mk.composed(mk.product(times, mk.rearr_arrays([0], [arr])), plus)
    scan = {"__type__": "Scan", "step": step, "base": mk.rearr_arrays([0], [arr]),
            "N": mk.int(n), "axis": mk.ref(ell), "affine": None, "n_states": 1,
            "step_state_deps": []}
    return mk.doc(mk.block(scan, mk.tag("Selective Scan")) if wrap else scan)


def _affine_reference(x, a, bias):
    """The recurrence, one step at a time."""
    h = [x]
    for i in range(a.shape[-1]):
        h.append(a[..., i] * h[-1] + bias[..., i])
    return np.stack(h, axis=-1)


def test_the_scan_decodes_and_types(mk, load_doc):
    spec = load_doc(_affine_scan(mk))
    scan = spec.data.body
    assert isinstance(scan, Scan) and scan.n == 4 and scan.axis.label == "l"
    assert [tuple(a.label for a in arr.shape) for arr in spec.data.dom] == [
        ("b",), ("b", "l"), ("b", "l")]
    (out,) = spec.data.cod
    assert [a.label for a in out.shape] == ["b", "l+1"] and out.shape[1].size == 5
    assert [d for d in spec.validate() if d.severity == "error"] == []


def test_both_backends_run_the_recurrence(mk, load_doc):
    spec = load_doc(_affine_scan(mk))
    env = spec.bind(None).env
    rng = np.random.default_rng(7)
    x, a, bias = rng.standard_normal(3), rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    want = _affine_reference(x, a, bias)
    got = ncdc.interpret(spec.data, env=env)(x, a, bias)[0]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    source, module = compile_torch(spec.data, env=env)
    assert "for " in source  # a loop over the recurrence axis, not N copies of the step
    out = module(*(torch.as_tensor(v) for v in (x, a, bias)))
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-13, atol=1e-15)


def test_a_lifted_scan_runs_each_batch_row_alone(mk, load_doc):
    """Leading batch dims (pyncd's orthogonal axes) are carried through every step."""
    spec = load_doc(_affine_scan(mk, n=3, b_size=2))
    env = spec.bind(None).env
    rng = np.random.default_rng(8)
    x, a, bias = rng.standard_normal((5, 2)), rng.standard_normal((5, 2, 3)), \
        rng.standard_normal((5, 2, 3))
    want = np.stack([_affine_reference(x[r], a[r], bias[r]) for r in range(5)])
    got = ncdc.interpret(spec.data, env=env)(x, a, bias)[0]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


def test_the_recurrence_axis_where_step_x_l_positions_puts_it(mk, load_doc):
    """pyncd's ``step_x_l_positions``: ``A`` written ``A[l, b]`` (position 0), ``B`` last."""
    doc = _affine_scan(mk)
    doc["data"]["body"]["step_x_l_positions"] = [0, 1]
    spec = load_doc(doc)
    assert [tuple(a.label for a in arr.shape) for arr in spec.data.dom] == [
        ("b",), ("l", "b"), ("b", "l")]
    env = spec.bind(None).env
    rng = np.random.default_rng(10)
    x, a_lb, bias = rng.standard_normal(3), rng.standard_normal((4, 3)), \
        rng.standard_normal((3, 4))
    want = _affine_reference(x, a_lb.T, bias)
    got = ncdc.interpret(spec.data, env=env)(x, a_lb, bias)[0]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    _, module = compile_torch(spec.data, env=env)
    out = module(*(torch.as_tensor(v) for v in (x, a_lb, bias)))
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-13, atol=1e-15)
    doc["data"]["body"]["step_x_l_positions"] = [0]  # one per per-step input
    assert "type-error" in {d.code for d in load_doc(doc).validate()}


def test_a_matrix_recurrence(mk, load_doc):
    """``H_{l+1}[i] = Σ_j A[i, j, l] H_l[j]``: the state comes back on ``i`` for ``j`` (the
    same size), as pyncd writes a recurrence whose state is contracted; validation warns, the
    backends run it."""
    i, j, ell = mk.axis("i", 3), mk.axis("j", 3), mk.axis("l", 4)
    matvec = mk.bc(mk.op("Einops", "einops", signature=[[0], [0]]),
                   [mk.weave(["*", j]), mk.weave([j])], [mk.weave(["*"])],
                   [mk.rearr([0], [i]), mk.rearr([], [i])])
    scan = {"__type__": "Scan", "step": mk.composed(mk.rearr_arrays(
        [1, 0], [mk.array([j]), mk.array([i, j])]), matvec),
        "base": mk.rearr_arrays([0], [mk.array([j])]), "N": mk.int(4), "axis": mk.ref(ell),
        "affine": None, "n_states": 1, "step_state_deps": []}
    spec = load_doc(mk.doc(scan))
    found = {(d.severity, d.code) for d in spec.validate()}
    assert ("warning", "scan-state") in found and not any(s == "error" for s, _ in found)
    rng = np.random.default_rng(12)
    x, a = rng.standard_normal(3), rng.standard_normal((3, 3, 4))
    h = [x]
    for t in range(4):
        h.append(a[:, :, t] @ h[-1])
    want = np.stack(h, axis=-1)
    env = spec.bind(None).env
    got = ncdc.interpret(spec.data, env=env)(x, a)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    _, module = compile_torch(spec.data, env=env)
    out = module(torch.as_tensor(x), torch.as_tensor(a)).detach().numpy()
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-14)


def test_a_wrong_step_count_and_state_are_reported(mk, load_doc):
    doc = _affine_scan(mk)
    doc["data"]["body"]["N"] = mk.int(5)  # the axis has 4 positions
    codes = [d.code for d in load_doc(doc).validate() if d.severity == "error"]
    assert codes == ["scan-steps"]


def test_a_symbolic_step_count_is_bound_and_a_huge_one_refused(mk, load_doc):
    steps = mk.symbol("L")
    doc = _affine_scan(mk)
    scan = doc["data"]["body"]
    ell = scan["axis"]["__ref__"]
    doc["uid_repository"][str(ell)]["_size"] = mk.ref(steps)
    doc["uid_repository"][str(steps)] = mk.doc(None)["uid_repository"][str(steps)]
    scan["N"] = mk.ref(steps)
    spec = load_doc(doc)
    rng = np.random.default_rng(11)
    x, a, bias = rng.standard_normal(3), rng.standard_normal((3, 6)), rng.standard_normal((3, 6))
    got = ncdc.interpret(spec.data, env=spec.bind(None, sizes={"L": 6}).env)(x, a, bias)[0]
    np.testing.assert_allclose(got, _affine_reference(x, a, bias), rtol=1e-13, atol=1e-15)
    env = spec.bind(None, sizes={"L": 70000}).env
    with pytest.raises(ncdc.SpecError) as err:
        ncdc.interpret(spec.data, env=env)(x, np.zeros((3, 70000)), np.zeros((3, 70000)))
    assert "runs 70000 steps" in str(err.value)


def _coupled(mk, n=3):
    """Two states stepped together (Jacobi): ``H' = H + G · U[:, l]`` reads both, ``G' = H``
    reads the old ``H`` only (``step_state_deps [[0, 1], [0]]``)."""
    b, ell = mk.axis("b", 2), mk.axis("l", n)
    arr = mk.array([b])
    times = mk.bc(mk.op("Einops", "einops", signature=[[], []]),
                  [mk.weave(["*"]), mk.weave(["*"])], [mk.weave(["*"])],
                  [mk.rearr([0], [b]), mk.rearr([0], [b])])
    plus = mk.bc(mk.op("AdditionOp", "+", part_of_fma=False),
                 [mk.weave(["*"]), mk.weave(["*"])], [mk.weave(["*"])],
                 [mk.rearr([0], [b]), mk.rearr([0], [b])])
    step_h = mk.composed(mk.product(mk.rearr_arrays([0], [arr]), times), plus)
    step_g = mk.rearr_arrays([0], [arr])
    scan = {"__type__": "Scan", "step": [step_h, step_g],
            "base": [mk.rearr_arrays([0], [arr]), mk.rearr_arrays([0], [arr])],
            "N": mk.int(n), "axis": mk.ref(ell), "affine": None, "n_states": 2,
            "step_state_deps": [[0, 1], [0]]}
    return mk.doc(mk.block(scan, mk.tag("Coupled")))


def test_a_coupled_scan_steps_every_state_from_the_old_ones(mk, load_doc):
    spec = load_doc(_coupled(mk))
    assert isinstance(spec.data.body, CoupledScan)
    assert [str(a) for a in spec.data.dom] == ["R[b]", "R[b]", "R[b, l]"]
    assert [str(a) for a in spec.data.cod] == ["R[b, l+1]", "R[b, l+1]"]
    assert [d for d in spec.validate() if d.severity == "error"] == []
    rng = np.random.default_rng(13)
    x, y, u = rng.standard_normal(2), rng.standard_normal(2), rng.standard_normal((2, 3))
    h, g, hs, gs = x, y, [x], [y]
    for t in range(3):
        h, g = h + g * u[:, t], h  # both from the old states
        hs.append(h)
        gs.append(g)
    want = (np.stack(hs, axis=-1), np.stack(gs, axis=-1))
    env = spec.bind(None).env
    got = ncdc.interpret(spec.data, env=env)(x, y, u)
    _, module = compile_torch(spec.data, env=env)
    out = module(*(torch.as_tensor(v) for v in (x, y, u)))
    for k in range(2):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(out[k].detach().numpy(), want[k], rtol=1e-13, atol=1e-15)


def test_a_coupled_scan_with_the_wrong_number_of_steps_is_refused(mk, load_doc):
    doc = _coupled(mk)
    doc["data"]["body"]["step"] = doc["data"]["body"]["step"][:1]
    with pytest.raises(ncdc.SpecError) as err:
        load_doc(doc)
    assert "2 states has 1 step" in str(err.value)


def test_the_cost_counts_the_step_n_times_and_its_weights_once():
    spec = ncdc.load(DATA / "scan_ex4.json")
    scan = spec.data.content[1]
    c = cost(scan)
    matmul = 2 * 8 * 64 * 64  # one Linear over q: 2 * |q| * |dh2| * |dh|
    relu = 8 * 64
    assert c.matmul_flops == 4 * matmul  # base + 3 steps
    assert c.flops == 4 * (matmul + relu)
    assert c.learned == 2 * 64 * 64  # base's and step's weights, each once


def test_a_scan_over_the_tokens_carries_its_state(mk, load_doc):
    """Incremental along its axis with one carried state; a scan over another axis is
    position by position along the tokens (it has none)."""
    over_tokens = analyse(load_doc(_affine_scan(mk, axis_name="x")).data)
    (rec,) = over_tokens.recurrences
    assert rec.kind == "recurrence" and rec.keep == 1 and over_tokens.incremental
    assert analyse(load_doc(_affine_scan(SpecMaker())).data).recurrences == ()


# ------------------------------------------------------------- scan_ex4.json (tsncd)
SCAN_EX4 = DATA / "scan_ex4.json"


def test_scan_ex4_decodes_and_its_joins_are_reported():
    """The layer before the scan gives ``R[q, dh]`` where the scan takes ``R[q, dh2]``, and the
    layer after it reads ``R[q, dh]`` where the scan gives the history ``R[q, dh, l+1]``: the
    file is a drawing whose joins do not type (pyncd's own torch lowering would hand the
    history to a map over ``dh``): two errors. Inside, the step takes the state on ``dh2``
    and gives it on ``dh``, of the same size: the recurrence runs, a warning each."""
    spec = ncdc.load(SCAN_EX4)
    scan = spec.data.content[1]
    assert isinstance(scan, Scan) and scan.n == 3 and scan.axis.label == "l"
    assert scan.axis.size == 3 and scan.history.size == 4
    found = [(d.severity, d.code, d.json_path) for d in spec.validate()]
    assert found == [
        ("error", "compose-mismatch", "data.content[1]"),
        ("error", "compose-mismatch", "data.content[2]"),
        ("warning", "scan-state", "data.content[1].base"),  # dh for dh2: both 64
        ("warning", "scan-state", "data.content[1].step")]


def test_scan_ex4s_recurrence_in_both_backends():
    """``H_0 = relu(x W_base)``, ``H_{l+1} = relu(H_l W_step)``, three steps, history last;
    the step's weight is one for every iteration."""
    from ncdc.codegen import load_interpreter_params

    spec = ncdc.load(SCAN_EX4)
    scan = spec.data.content[1]
    env = spec.bind(None).env
    keys = [p.key for p in spec.params(root=scan)]
    assert keys == ["L_{W}.weight", "L_{W}~1.weight"]  # base, step
    rng = np.random.default_rng(9)
    wb, ws = rng.standard_normal((64, 64)) / 8, rng.standard_normal((64, 64)) / 8
    x = rng.standard_normal((8, 64))
    h = [np.maximum(x @ wb, 0.0)]
    for _ in range(3):
        h.append(np.maximum(h[-1] @ ws, 0.0))
    want = np.stack(h, axis=-1)
    params = dict(zip(keys, (wb, ws), strict=True))
    got = ncdc.interpret(scan, env=env, params=params)(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    _, module = compile_torch(scan, env=env)
    load_interpreter_params(module, params)
    out = module(torch.as_tensor(x)).detach().numpy()
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-14)


def test_the_view_draws_the_scan_as_a_container():
    """As pyncd's viewer does: one box ``Scan over l, N=3`` holding base and one step; the
    wire out of it carries the history."""
    from ncdc.view.scene import build_scene

    spec = ncdc.load(SCAN_EX4)
    scene = build_scene(spec.data)
    box = scene["nodes"]["data.content[1]"]
    assert box["kind"] == "block" and box["label"] == "Scan over l, N=3"
    inside = sorted(k for k, n in scene["nodes"].items() if n.get("parent") == "data.content[1]")
    assert [k.split(".")[2] for k in inside] == ["base", "base", "step", "step"]
    (out,) = [e for e in scene["edges"]["root"] if e["src"] == "data.content[1]"]
    assert out["label"] == "R[q, dh, l+1]"
