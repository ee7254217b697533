"""Codegen rules and helpers: coverage of every operator kind, and the small emitters checked
against independent references (einsum subscripts, sympy, naive index loops)."""
from __future__ import annotations

import ast
import itertools
import keyword

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from ncdc import interpreter
from ncdc.codegen.emit import SizePrinter, align_code, wrap_line
from ncdc.codegen.formula import FormulaPrinter
from ncdc.codegen.names import class_name, docstring, identifier, snake_case
from ncdc.codegen.passes import drop_unused, fold_masks
from ncdc.codegen.rules import RULES, load_rules
from ncdc.codegen.statements import ASSIGN, IF, RETURN, Statement, print_body
from ncdc.ir.numeric import FREE_INPUT, FreeNumeric
from ncdc.ir.operators import ALL_OPERATORS
from ncdc.ir.rewrites import REWRITE_OPERATORS
from tests.lazy import torch


def test_rules_cover_every_operator_in_both_backends():
    load_rules()
    assert set(RULES) == set(interpreter.RULES) == set(ALL_OPERATORS) | set(REWRITE_OPERATORS)


# -- alignment ------------------------------------------------------------------------------
LETTERS = "abcd"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(LETTERS), min_size=1, max_size=4), st.data())
def test_align_code_matches_einsum(src, data):
    """Labels of the source dims (repeats = diagonal) to a target order with new dims."""
    present = list(dict.fromkeys(src))
    extra = data.draw(st.lists(st.sampled_from([c for c in "wxyz"]), unique=True, max_size=2))
    dst = data.draw(st.permutations(present + extra))
    sizes = {c: 3 for c in LETTERS}
    v = torch.randn((2,) + tuple(sizes[c] for c in src), dtype=torch.float64)
    got = eval(align_code("v", list(src), list(dst)), {"torch": torch, "v": v})
    want = torch.einsum("z" + "".join(src) + "->z" + "".join(c for c in dst if c in present), v)
    shape = [2] + [sizes[c] if c in present else 1 for c in dst]
    assert torch.equal(got, want.reshape(shape))


# -- sizes and formulas -----------------------------------------------------------------------
def _syms():
    from ncdc.ir.names import Name

    return [FreeNumeric(900 + i, Name(n)) for i, n in enumerate("abct")]


@pytest.mark.parametrize("build", [
    lambda a, b, c, t: a * b, lambda a, b, c, t: c - 2 * t, lambda a, b, c, t: 1 - a,
    lambda a, b, c, t: -(b * t), lambda a, b, c, t: (a + b) * c, lambda a, b, c, t: a * b / 2,
    lambda a, b, c, t: c - 2 * t + 1, lambda a, b, c, t: 2 ** a, lambda a, b, c, t: -a * b * c,
])
def test_size_printer_evaluates_like_sympy(build):
    syms = _syms()
    expr = build(*syms)
    values = {s: v for s, v in zip(syms, (2, 6, 64, 8), strict=True)}
    code = SizePrinter(lambda s: f"v_{s.label}")(expr)
    got = eval(code, {f"v_{s.label}": v for s, v in values.items()})
    assert got == int(expr.xreplace(values))


def _formulas(bundled):
    from ncdc import ir

    seen = {}
    for site in ir.walk(bundled.data):
        if isinstance(site.node, ir.Broadcasted) and isinstance(site.node.operator,
                                                                 ir.Arithmetic):
            f = site.node.operator.formula
            seen[sympy.srepr(f)] = f
    return list(seen.values())


def test_formula_printer_matches_sympy_lambdify(bundled):
    """Every formula of the bundled spec, printed as torch code, against sympy's own numpy
    lambdify of the same expression (constants from the tiny binding)."""
    env = bundled.bind("tiny").env
    x = np.linspace(-3.0, 3.0, 41)
    x = x[x != 0]
    for f in _formulas(bundled):
        values = {s: env.number(s) for s in f.free_symbols if isinstance(s, FreeNumeric)}
        code = FormulaPrinter("x", lambda s: f"const[{s.uid}]")(f)
        const = {s.uid: v for s, v in values.items()}
        xt = torch.tensor(x + 0j if f.has(sympy.conjugate) else x, dtype=torch.complex128
                          if f.has(sympy.conjugate) else torch.float64)
        got = eval(code, {"torch": torch, "math": __import__("math"), "x": xt, "const": const})
        modules = [{"Sigmoid": lambda a: 1 / (1 + np.exp(-a)),
                    "IsPositive": lambda a: (a > 0).astype(float),
                    "Ceiling": np.ceil}, "numpy"]
        fn = sympy.lambdify([FREE_INPUT], f.xreplace(values), modules=modules)
        with np.errstate(all="ignore"):
            want = np.broadcast_to(fn(xt.numpy()), x.shape)
        got = torch.as_tensor(got).expand(xt.shape).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True,
                                   err_msg=f"{sympy.sstr(f)} -> {code}")


# -- names and literals -----------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.text())
def test_identifiers_are_always_valid(text):
    for name in (identifier(text), identifier(text, lower=False), class_name(text),
                 snake_case(class_name(text))):
        assert name.isidentifier() and not keyword.iskeyword(name)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_docstrings_evaluate_to_the_text(text):
    lit = docstring(text, "    ")
    src = f"class C:\n    {lit}\n    x = 1\n"
    tree = ast.parse(src)
    assert len(tree.body) == 1 and len(tree.body[0].body) == 2
    value = ast.literal_eval(lit)
    lines = value.split("\n")
    if len(text.split("\n")) > 1:
        lines = [lines[0]] + [ln.removeprefix("    ") for ln in lines[1:-1]]
    assert "\n".join(lines) == text


def test_names_read_well():
    assert identifier(r"W^{Qa}") == "w_qa"
    assert identifier(r"\varepsilon_{\mathrm{hc}}", lower=False) == "varepsilon_hc"
    assert identifier(r"\lvert x \rvert") == "abs_x"
    assert class_name("Single-Pass mHC") == "SinglePassMHC"
    assert snake_case("FP8RoundTripOfAWindowLatent") == "fp8_round_trip_of_a_window_latent"


# -- line handling ------------------------------------------------------------------------------
LONG = [
    ("        normed = w_qa_out / torch.sqrt(w_qa_out.pow(2).mean(dim=-1, keepdim=True) + "
     "self.epsilon) * self.rms_norm_gain  # [x, q]"),
    ("        self.sliding_window_attention = SlidingWindowAttention(a=a, beta_0=beta_0, c=c, "
     "epsilon=epsilon, g=g, h=h, hat_y=hat_y, j=j, m=m, o=o, q=q, t=t, w=w, quant=quant)"),
    ("        win, win_live = affine_read(fp8_round_trip_of_a_window_latent.transpose(-2, -1), "
     "[((1, -1), 0)], (x_m.shape[-2], self.w))  # reads outside are dead"),
    ("        as_mxfp8_2 = mx_block_round(as_bf16_with_a_long_name, 'E4M3', 32) if self.emulate "
     "else as_bf16_with_a_long_name  # held in Q(E4M3|UE8M0/32)"),
    ("        self.w_oa = nn.Parameter(torch.empty(self.config.head_groups * "
     "self.config.output_rank, self.config.heads_per_group * self.config.latent_width))"),
]


@pytest.mark.parametrize("line", LONG)
def test_wrap_line_keeps_the_statement(line):
    wrapped = wrap_line(line)
    assert all(len(ln) <= 100 for ln in wrapped)
    body = "\n".join(ln[8:] if ln.startswith("        ") else ln.lstrip() for ln in wrapped)
    assert ast.dump(ast.parse(body)) == ast.dump(ast.parse(line.strip()))


def test_a_call_of_one_call_keeps_both_brackets_on_its_first_line():
    """``f(g(a, b))`` too long for two lines breaks inside ``g``, hanging: three lines, not
    four; where ``f`` takes more than the one call it breaks as before."""
    assert wrap_line(LONG[-1]) == [
        "        self.w_oa = nn.Parameter(torch.empty(",
        "            self.config.head_groups * self.config.output_rank,",
        "            self.config.heads_per_group * self.config.latent_width))"]
    two = LONG[-1].replace("latent_width))", "latent_width), requires_grad=False)")
    assert wrap_line(two)[0] == "        self.w_oa = nn.Parameter("


def test_a_call_aligns_its_arguments_with_the_bracket_where_that_saves_a_line():
    """Arguments that fit on two lines aligned with the opening bracket break there (PEP 8's
    first form); where aligning takes as many lines, the hanging indent stays."""
    line = ("        self.h_2 = Linear(self.config.streams * self.config.hidden_width, "
            "self.config.streams * self.config.streams)")
    assert wrap_line(line) == [
        "        self.h_2 = Linear(self.config.streams * self.config.hidden_width,",
        "                          self.config.streams * self.config.streams)"]
    deep = "        " + "x" * 60 + " = f(" + ", ".join(["a" * 30] * 3) + ")"
    assert wrap_line(deep)[0].endswith(" = f(")


def test_drop_unused_removes_only_dead_assignments():
    body = [Statement(ASSIGN, "f(x)", ("a",)),
            Statement(ASSIGN, "g(a)", ("b_live",), comment="a mask nobody reads"),
            Statement(ASSIGN, "h(a)", ("c", "c_live")), Statement(IF, "e"),
            Statement(ASSIGN, "k(c)", ("c",), depth=1), Statement(RETURN, "c")]
    assert print_body(body, "    ") == [
        "    a = f(x)", "    b_live = g(a)  # a mask nobody reads", "    c, c_live = h(a)",
        "    if e:", "        c = k(c)", "    return c"]
    assert print_body(drop_unused(body), "    ") == [
        "    a = f(x)", "    c, _ = h(a)", "    if e:", "        c = k(c)", "    return c"]


def test_passes_read_names_not_text():
    """A keyword argument or a string literal spelling a local's name is no read of it: the
    passes see the parsed expression, so the dead ``dim`` and ``alpha`` go and the alias
    ``b = a`` is renamed in code but not inside a string."""
    body = [Statement(ASSIGN, "f(x)", ("dim",)), Statement(ASSIGN, "g(x)", ("alpha",)),
            Statement(ASSIGN, "a", ("b",)),
            Statement(RETURN, "torch.sum(require(b, 'alpha b'), dim=-1)")]
    assert print_body(fold_masks(drop_unused(body), 4), "    ") == [
        "    return torch.sum(require(a, 'alpha b'), dim=-1)"]


# -- the torch view helpers against naive loops --------------------------------------------------
def _naive_read(src, rows, sizes):
    p = len(rows)
    ext = src.shape[src.dim() - p:]
    lead = src.shape[:src.dim() - p]
    out = torch.zeros(*lead, *sizes, dtype=src.dtype)
    live = torch.zeros(sizes, dtype=torch.bool)
    for d in itertools.product(*[range(n) for n in sizes]):
        c = [sh + sum(s * i for s, i in zip(stv, d, strict=True)) for stv, sh in rows]
        if all(0 <= cj < n for cj, n in zip(c, ext, strict=True)):
            out[(...,) + d] = src[(...,) + tuple(c)]
            live[d] = True
    return out, live


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_affine_read_matches_naive_gather(data):
    from ncdc.codegen.prelude.views import affine_read

    r = data.draw(st.integers(1, 3))
    p = data.draw(st.integers(1, 2))
    sizes = tuple(data.draw(st.lists(st.integers(1, 4), min_size=r, max_size=r)))
    ext = tuple(data.draw(st.lists(st.integers(1, 5), min_size=p, max_size=p)))
    rows = [(tuple(data.draw(st.lists(st.integers(-2, 3), min_size=r, max_size=r))),
             data.draw(st.integers(-3, 3))) for _ in range(p)]
    src = torch.randn((2,) + ext, dtype=torch.float64)
    got, live = affine_read(src, rows, sizes)
    want, want_live = _naive_read(src, rows, sizes)
    assert torch.equal(live, want_live)
    assert torch.equal(torch.where(live, got, 0), want)


def test_affine_write_scatters_and_marks_holes():
    from ncdc.codegen.prelude.views import affine_write

    x = torch.arange(6.0).reshape(2, 3)
    vals, live = affine_write(x, [((1,), 2)], (6,))
    assert torch.equal(live, torch.tensor([False, False, True, True, True, False]))
    assert torch.equal(vals[:, 2:5], x) and not vals[:, [0, 1, 5]].any()
    one, live1 = affine_write(torch.ones(()), [((), 0)], (4,))
    assert one.tolist() == [1, 0, 0, 0] and live1.tolist() == [True, False, False, False]


def test_held_is_identity_in_exact_mode_and_rounds_in_emulate_mode():
    from ncdc.codegen.prelude.quant import held

    x = torch.tensor([1.0 + 2.0 ** -30, 3.0, -0.1], dtype=torch.float64)
    assert held(x, "FP32", False) is x
    want = x.to(torch.float32).to(torch.float64)  # RNE to binary32, independently
    assert torch.equal(held(x, "FP32", True), want)
    y = torch.linspace(-3, 3, 64, dtype=torch.float64)
    from ncdc.codegen.prelude.quant import mx_block_round

    assert torch.equal(held(y, "E4M3", True, 32), mx_block_round(y, "E4M3", 32))
    assert held(y, "E4M3", False, 32) is y
