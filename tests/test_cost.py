"""The cost model (ir/cost.py) against counts worked out by hand from the block descriptions
(docs/format.md §13-14 and the spec's BlockTag descriptions) and the counting rules stated in the
module docstring; and ``ncdc cost``."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import sympy

import ncdc
from ncdc.cli import main
from ncdc.ir.cost import cost, formula_ops, weight_bytes
from ncdc.ir.params import param_specs
from tests.conftest import TRANSFORMER


@pytest.fixture(scope="module")
def spec():
    return ncdc.load()


@pytest.fixture(scope="module")
def released(spec):
    return spec.bind("released", {"b": 4}).env


def sym(spec, label):
    """The size symbol of the bundled spec with this label (the sizes, not the bounds)."""
    hits = [s for s in spec.symbols.values() if s.label == label]
    assert hits, label
    return hits[0] if len(hits) == 1 else next(s for s in hits if s.uid != 277713878)


def S(spec, *labels):
    return [sym(spec, x) for x in labels]


def block(spec, title):
    return spec.site(title).node


NGRAM_TABLE = ("data.content[3].content[1].body.operator.block.body.content[1].content[1]"
               ".content[0].content[1].content[3]")


# ----------------------------------------------------------------- oracles, symbolically


def test_expert_gate(spec):
    m, e, k = S(spec, "m", "e", "k")
    c = cost(block(spec, "Expert Gate"))
    assert c.tokens == 1  # runs per token
    # W^R [m, e] and the router bias [e] (docs/format.md §13.1)
    assert sympy.expand(c.learned - (m * e + e)) == 0
    assert sympy.expand(c.activated_per_token - (m * e + e)) == 0
    # cast to FP32 (m), W^R (2 m e), x/tau (e), sqrt(softplus) = sqrt(log(exp(x) + 1)) (4 e),
    # + bias (e), TopK scan (e), 1_{x>0} on the kept k, Select (k), L1Norm with eps_r (2k + 1),
    # 3/2 x (k)
    want = m + 2 * m * e + e + 4 * e + e + e + k + k + (2 * k + 1) + k
    assert sympy.expand(c.flops_per_token - want) == 0


def test_routed_experts(spec, released):
    m, e, k, f = S(spec, "m", "e", "k", "f")
    c = cost(block(spec, "Routed Experts"))
    # W^G, W^U [m, k/e, f], W^D [f, k/e, m]: three banks of e experts, k of them live
    assert sympy.expand(c.learned - 3 * m * e * f) == 0
    assert sympy.expand(c.activated_per_token - 3 * m * k * f) == 0
    # MXFP8 cast of the input (4 m); W^G, W^U (2 m k f each); on [k/e, f], k live: cast (1),
    # min(x, lambda) = x - max(0, x - lambda) (4), SiLU x*sigma(x) (2), cast (1),
    # clamp (2), G*U (1), cast BF16 (1), MXFP8 cast (4); W^D one slab per live expert (2 k f m)
    want = 4 * m + 2 * (2 * m * k * f) + k * f * (1 + 4 + 2 + 1 + 2 + 1 + 1 + 4) + 2 * k * f * m
    assert sympy.expand(c.flops_per_token - want) == 0
    # released: three banks of 4.53 B (issue 11)
    assert released.subs(c.learned) == 3 * 4_529_848_320
    assert 5120 * 384 * 2304 == 4_529_848_320


def test_shared_expert(spec):
    m, f = S(spec, "m", "f")
    c = cost(block(spec, "Shared Expert"))
    assert sympy.expand(c.learned - 3 * m * f) == 0
    assert sympy.expand(c.activated_per_token - 3 * m * f) == 0
    want = 4 * m + 2 * (2 * m * f) + f * 16 + 2 * f * m
    assert sympy.expand(c.flops_per_token - want) == 0


def test_attention_core(spec):
    a, b, c_, w = S(spec, "a", "b", "c", "w")
    x = a * b
    core = cost(block(spec, "Attention Core"))
    assert core.learned == 0 and core.tokens == x
    # per head: scores q.K (2 x w c), scale, exp, sum over slots, cast BF16 (x w each);
    # e^sink (1); denominator + and reciprocal (x each); e.K (2 x c w); * 1/den and cast (x c)
    want = 2 * x * w * c_ + 4 * x * w + 1 + 2 * x + 2 * x * c_ * w + 2 * x * c_
    assert sympy.expand(core.flops - want) == 0
    assert sympy.simplify(core.flops_per_token - want / x) == 0
    # its largest array: the scores [x, w|x] in FP32, or the window K [x, w|x, c] in BF16
    assert max(sympy.Poly(arr.bytes, a, b, c_, w).total_degree() for arr in core.arrays) == 3


def test_attention_core_after_the_pipeline(spec):
    """The normalized term (what the backends run) has a cost too: the sink shift the pipeline
    puts before the exponentials adds its joint maximum and two subtractions per row (2 w + 2
    per query token), and the shifted sink's exponential is taken per row (x times, not once)."""
    from ncdc.ir.pipeline import normalize

    a, b, c_, w = S(spec, "a", "b", "c", "w")
    x = a * b
    core = block(spec, "Attention Core")
    shifted = cost(normalize(core))
    assert sympy.expand(shifted.flops - cost(core).flops - x * (2 * w + 2) - (x - 1)) == 0


def test_ngram_table(spec, released):
    G, K, D, n, m, T1 = S(spec, "G", "K", "D", "n", "m", "T_{1}")
    c = cost(spec.site(NGRAM_TABLE).node)
    # E_ng1 [T_1, D], W^K_1 [G, K, D, n, m], W^V_1 [G, K, D, m]
    assert sympy.expand(c.learned - (T1 * D + G * K * D * n * m + G * K * D * m)) == 0
    # a token looks up G*K rows of D, and uses both projections whole
    assert sympy.expand(c.activated_per_token - (G * K * D + G * K * D * (n + 1) * m)) == 0
    assert sympy.expand(c.flops_per_token - 2 * G * K * D * (n + 1) * m) == 0
    assert released.subs(T1 * D) == 98_305_579_008  # the 98.3 B table of issue 11


def test_salvaged_totals_released(spec, released):
    c = cost(spec.data)
    assert released.subs(c.learned) == 112_879_311_088  # 112.9 B (issue 11)
    assert c.partial  # the cut layer is counted as far as it is complete
    # per token: everything dense, k of e experts, one embedding row, 24 n-gram rows
    routed = 3 * 5120 * 384 * 2304
    dense = 112_879_311_088 - 129280 * 5120 - 384006168 * 256 - routed
    assert released.subs(c.activated_per_token) == dense + 3 * 5120 * 6 * 2304 + 5120 + 24 * 256


def test_cost_agrees_with_param_listing(spec, transformer):
    for sp in (spec, transformer):
        env = sp.bind("tiny").env
        want = sum(env.subs(sympy.Mul(*p.shape)) for p in param_specs(sp.data, env) if p.learned)
        assert env.subs(cost(sp.data).learned) == want


def test_decoder_state(spec, released):
    c_, w = S(spec, "c", "w")
    swa = cost(block(spec, "Sliding Window Attention"))
    (st,) = swa.state
    assert st.label == "View win" and sympy.expand(st.slice - c_) == 0 and st.window == w
    assert released.subs(st.bytes) == 512 * 127 * 2  # BF16 latents of the 127 earlier tokens
    whole = cost(spec.data)
    assert sorted(s.label for s in whole.state) == ["View ngram", "View win"]
    ngram = next(s for s in whole.state if s.label == "View ngram")
    assert released.subs(ngram.elements) == 3  # compressed ids of the 3 earlier tokens


# ----------------------------------------------------------------- formats and formulas


def test_weight_bytes_formats():
    # 3 rows of 70: MXFP8 one byte each + ceil(70/32) = 3 UE8M0 scales per row;
    # MXFP4 ceil(70/2) = 35 packed bytes per row + the same scales
    assert weight_bytes((3, 70), "float32") == 840
    assert weight_bytes((3, 70), "bfloat16") == 420
    assert weight_bytes((3, 70), "mxfp8") == 3 * 70 + 3 * 3
    assert weight_bytes((3, 71), "mxfp4") == 3 * 36 + 3 * 3
    assert weight_bytes((64,), "mxfp4") == 32 + 2


def test_weight_bytes_against_ml_dtypes():
    np = pytest.importorskip("numpy")
    ml = pytest.importorskip("ml_dtypes")
    rows, last = 5, 96
    elems = np.zeros((rows, last), ml.float8_e4m3fn)
    scales = np.zeros((rows, last // 32), ml.float8_e8m0fnu)
    assert weight_bytes((rows, last), "mxfp8") == elems.nbytes + scales.nbytes
    packed = np.zeros((rows, last // 2), np.uint8)  # two E2M1 codes per byte
    assert weight_bytes((rows, last), "mxfp4") == packed.nbytes + scales.nbytes


def test_formula_ops():
    from ncdc.ir.numeric import FREE_INPUT as x

    assert formula_ops(sympy.exp(x)) == 1
    assert formula_ops(x * sympy.Symbol("t") ** -1) == 1  # x / tau: one division
    assert formula_ops(sympy.Integer(3) / 2 * x) == 1
    assert formula_ops(sympy.sqrt(sympy.log(sympy.exp(x) + 1))) == 4
    assert formula_ops(sympy.Integer(5)) == 0


# ----------------------------------------------------------------- huge sizes stay symbolic


def _with_repetition(transformer_json, value):
    doc = transformer_json
    for rec in doc["uid_repository"].values():
        if rec.get("__type__") == "BlockTag" and rec["repetition"].get("_value") == 6:
            rec["repetition"]["_value"] = value
    return doc


@pytest.mark.parametrize("rep", [1, 10**12])
def test_huge_repetition_is_symbolic_and_fast(tmp_path, transformer_json, transformer, rep):
    six = cost(transformer.data)
    one_doc = _with_repetition(json.loads(json.dumps(transformer_json)), 1)
    p1 = tmp_path / "one.json"
    p1.write_text(json.dumps(one_doc))
    one = cost(ncdc.load(p1).data)
    doc = _with_repetition(transformer_json, rep)
    path = tmp_path / "rep.json"
    path.write_text(json.dumps(doc))
    sp = ncdc.load(path)
    t0 = time.perf_counter()
    c = cost(sp.data)
    env = sp.bind("tiny").env
    learned, flops = env.subs(c.learned), env.subs(c.flops)
    assert time.perf_counter() - t0 < 2.0
    env6 = transformer.bind("tiny").env
    per_layer = (env6.subs(six.learned) - env6.subs(one.learned)) / 5
    assert per_layer > 0
    assert learned == env6.subs(one.learned) + (rep - 1) * per_layer
    per_layer_flops = (env6.subs(six.flops) - env6.subs(one.flops)) / 5
    assert flops == env6.subs(one.flops) + (rep - 1) * per_layer_flops


def _power(base, exponent):
    return {"__type__": "Power", "base": {"__type__": "Integer", "_value": base},
            "exponent": {"__type__": "Integer", "_value": exponent}}


@pytest.mark.parametrize("rep, refused", [(_power(10, 300), False),
                                          (_power(10**300, 10**30), True)])
def test_a_repetition_too_large_to_evaluate_is_refused_fast(tmp_path, transformer_json, capsys,
                                                           rep, refused):
    """A repetition (10**300)**(10**30) (campaign case 2448) has ~2e30 bits: multiplying the
    body's cost by it once expanded it without bound. It is refused (typed, in milliseconds);
    10**300 is counted exactly."""
    doc = _with_repetition(transformer_json, 6)
    for rec in doc["uid_repository"].values():
        if rec.get("__type__") == "BlockTag" and rec["repetition"].get("_value") == 6:
            rec["repetition"] = rep
    path = tmp_path / "rep.json"
    path.write_text(json.dumps(doc))
    t0 = time.process_time()
    rc = main(["cost", str(path), "--json"])
    assert time.process_time() - t0 < 2.0
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    if refused:
        assert rc == 1
        assert json.loads(out.out)["error"]["type"] == "BindingError"
        assert "too large to count" in out.out
    else:
        assert rc == 0
        one = json.loads(out.out)
        assert one  # a report, with the exact count inside (checked by the symbolic test)


def test_huge_sizes_stay_exact(spec):
    env = spec.bind("released", {"b": 2**62, "e": 2**40}).env
    c = cost(spec.data)
    t0 = time.perf_counter()
    val = env.subs(c.learned)
    assert time.perf_counter() - t0 < 1.0
    assert val > 3 * 5120 * 2**40 * 2304 and val.is_Integer


# ----------------------------------------------------------------- the command


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_cost_json(capsys):
    rc, out, _ = run(capsys, "cost", "--json", "--tokens", "8", "--weights", "mxfp8")
    assert rc == 0
    doc = json.loads(out)
    t = doc["total"]
    assert t["learned"]["value"] == 112_879_311_088
    assert t["tokens_per_call"]["value"] == 8
    assert t["weight_bytes"]["float32"]["value"] == 4 * 112_879_311_088
    assert t["weight_bytes"]["bfloat16"]["value"] == 2 * 112_879_311_088
    titles = [r["block"].rsplit(" / ", 1)[-1] for r in doc["blocks"]]
    for want in ("Expert Gate", "Routed Experts", "Shared Expert", "Attention Core",
                 "N-gram Table"):
        assert want in titles
    routed = doc["blocks"][titles.index("Routed Experts")]
    assert routed["learned"]["formula"] == "3*e*f*m"
    assert routed["weight_bytes"]["mxfp8"]["value"] == 3 * (5120 * 384 * 2304) * 33 // 32


def test_cli_cost_text_and_block(capsys):
    rc, out, _ = run(capsys, "cost", "--block", "Routed Experts", "--preset", "tiny")
    assert rc == 0
    assert "Routed Experts" in out and "learned elements        49,152   [3*e*f*m]" in out  # 3*64*8*32


def test_cli_cost_errors(capsys):
    rc, _, err = run(capsys, "cost", "--weights", "fp7")
    assert rc == 1 and "unknown weight format" in err
    rc, _, err = run(capsys, "cost", "--tokens", "7")  # x = a*b with a = 2
    assert rc == 1 and "--tokens 7" in err


def test_cli_cost_transformer(capsys):
    rc, out, _ = run(capsys, "cost", str(TRANSFORMER), "--preset", "tiny", "--json")
    assert rc == 0 and json.loads(out)["total"]["learned"]["value"] > 0


@pytest.mark.slow
def test_cli_cost_tokens_override_a_preset(capsys):
    # tiny binds b = 6; --tokens 16 solves x = a*b for b (the size with no released value)
    rc, out, _ = run(capsys, "cost", "--preset", "tiny", "--tokens", "16", "--json")
    assert rc == 0 and json.loads(out)["total"]["tokens_per_call"]["value"] == 16
    rc, out, _ = run(capsys, "cost", str(TRANSFORMER), "--preset", "tiny", "--tokens", "16",
                     "--json")
    assert rc == 0 and json.loads(out)["total"]["tokens_per_call"]["value"] == 16


@pytest.mark.parametrize("title", ["Shared Expert", "Expert Gate", "Sliding Window Attention",
                                   "Attention Core", "Grouped Output Projection",
                                   "Routed Experts"])
def test_contraction_flops_match_torch_flop_counter(spec, title):
    """Contraction FLOPs against torch's own count of the generated module's matrix products
    (an independent implementation); the generated Routed Experts block alone computes every
    expert densely, so there the count is compared with k = e."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from ncdc import interpreter

    env = spec.bind("tiny").env
    m = block(spec, title)
    _, module = ncdc.compile_torch(m, env=env)
    inputs = [torch.as_tensor(x[0] if isinstance(x, tuple) else x)
              for x in interpreter.random_inputs(m, env, 0)]
    counter = FlopCounterMode(display=False)
    with counter:
        module(*inputs)
    want = cost(m).matmul_flops
    if title == "Routed Experts":
        want = want.subs(sym(spec, "k"), sym(spec, "e"))
    assert counter.get_total_flops() == env.subs(want)


def test_weight_bytes_group_along_contracted_axes():
    # a Linear weight [in=70, out=3]: scales group its 70 input positions, per output
    assert weight_bytes((70, 3), "mxfp8", lead=1) == 3 * 70 + 3 * 3
    assert weight_bytes((2, 35, 3), "mxfp4", lead=2) == 3 * 35 + 3 * 3


def test_cli_cost_huge_repetition(tmp_path, transformer_json, capsys):
    path = tmp_path / "rep.json"
    path.write_text(json.dumps(_with_repetition(transformer_json, 10**12)))
    t0 = time.perf_counter()
    rc, out, _ = run(capsys, "cost", str(path), "--preset", "tiny", "--json")
    assert rc == 0 and time.perf_counter() - t0 < 10
    doc = json.loads(out)
    assert doc["total"]["learned"]["value"] > 10**12
    rc, _, err = run(capsys, "eval", str(path), "--preset", "tiny")
    # refused before anything is allocated: by the size gate (repetitions beyond 65536) that
    # runs before the memory preflight
    assert rc == 1 and "repeats 1000000000000 times" in err and "refused" in err


def test_cli_cost_weight_policy_total(capsys):
    rc, out, _ = run(capsys, "cost", "--json", "--weights", "*/Routed Experts/*=mxfp4",
                     "--weights", "*.table=mxfp8", "--weights", "bf16")
    assert rc == 0
    got = json.loads(out)["total"]["policy_bytes"]["value"]
    bank = 5120 * 384 * 2304  # each a Linear [in, k/e, out]: scales along the 5120 or 2304 inputs
    routed = 3 * (bank // 2 + bank // 32)
    tables = sum(n * d + n * (d // 32) for n, d in ((129280, 5120), (384006168, 256)))
    rest = 112_879_311_088 - 3 * bank - 129280 * 5120 - 384006168 * 256
    assert got == routed + tables + 2 * rest


def test_a_size_too_large_to_print_is_refused_fast_without_a_digit_limit(tmp_path, capsys):
    """A size 3**(10**6) (campaign cases 12934, 13288): the refusal's message does not print the
    1.6-million-bit literal, so it stays fast even where Python's 4300-digit limit is lifted."""
    import sys

    path = Path(__file__).parent / "data" / "pyncd" / "tl_causal_mask.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    rec = doc["uid_repository"]["1911784258"]
    assert "_size" in rec
    rec["_size"] = {"__type__": "Power", "base": {"__type__": "Integer", "_value": 3},
                    "exponent": {"__type__": "Integer", "_value": 10**6}}
    target = tmp_path / "spec.json"
    target.write_text(json.dumps(doc), encoding="utf-8")
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        t0 = time.process_time()
        rc = main(["cost", str(target)])
        took = time.process_time() - t0
    finally:
        sys.set_int_max_str_digits(old)
    err = capsys.readouterr().err
    assert rc == 1 and "too large" in err and "Traceback" not in err
    assert took < 2.0
