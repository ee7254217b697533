"""The einsums written as ``torch.matmul`` (codegen/matmul.py): the same numbers as
``torch.einsum`` of the same spec, the result in the output's order and contiguous, and no
matmul where the einsum is not one batched matrix (or matrix-vector) product."""
import pytest

from ncdc.codegen.matmul import matmul_code
from tests.lazy import torch


def _run(code, **arrays):
    from ncdc.codegen.prelude.linear import vecmat

    return eval(code, {"torch": torch, "vecmat": vecmat}, arrays)  # noqa: S307 - code under test


@pytest.mark.parametrize("a_labels,b_labels,out,spec", [
    ("xnm", "xna", "xam", "...xnm,...xna->...xam"),  # the mHC's combine: comb^T @ streams
    ("xnm", "xna", "xma", "...xnm,...xna->...xma"),
    ("xmn", "xna", "xma", "...xmn,...xna->...xma"),
    ("xmn", "xan", "xam", "...xmn,...xan->...xam"),
    ("mn", "na", "ma", "...mn,...na->...ma"),
    ("xn", "xnm", "xm", "...xn,...xnm->...xm"),  # the mHC's collapse: a row vector
    ("xnm", "xn", "xm", "...xnm,...xn->...xm"),
    ("xmn", "xn", "xm", "...xmn,...xn->...xm"),  # a column vector
    ("n", "nm", "m", "...n,...nm->...m"),
])
def test_matmul_equals_einsum(a_labels, b_labels, out, spec):
    sizes = {"x": 3, "n": 4, "m": 5, "a": 6}
    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, *[sizes[c] for c in a_labels], generator=g, dtype=torch.float64)
    b = torch.randn(2, *[sizes[c] for c in b_labels], generator=g, dtype=torch.float64)
    code = matmul_code([("a", list(a_labels)), ("b", list(b_labels))], list(out))
    assert code is not None and code.startswith(("torch.matmul(", "vecmat("))
    got = _run(code, a=a, b=b)
    want = torch.einsum(spec, a, b)
    assert got.shape == want.shape and got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)


def test_a_vector_keeps_the_matrix_layout():
    used = []
    code = matmul_code([("s", ["x", "n"]), ("h", ["x", "n", "m"])], ["x", "m"], used.append)
    assert code == "vecmat(s, h)" and used == ["linear"]  # the prelude's product
    code = matmul_code([("h", ["x", "m", "n"]), ("s", ["x", "n"])], ["x", "m"])
    assert code == "torch.matmul(h, s.unsqueeze(-1)).squeeze(-1)"


def test_the_combine_is_transposed_on_the_left():
    code = matmul_code([("h", ["x", "n", "m"]), ("c", ["x", "n", "a"])], ["x", "a", "m"])
    assert code == "torch.matmul(c.transpose(-2, -1), h)"


@pytest.mark.parametrize("terms,out", [
    ([("a", ["x", "n"]), ("b", ["x", "n"])], ["x"]),  # no free axis on either side
    ([("a", ["x", "n", "m"]), ("b", ["x", "n"])], ["m", "x"]),  # a vector's batch not first
    ([("a", ["x", "n", "m"]), ("b", ["n", "x", "a"])], ["x", "a", "m"]),  # batch not leading
    ([("a", ["x", "n", "m"]), ("b", ["x", "n", "a"])], ["a", "x", "m"]),  # batch not first
    ([("a", ["n", "m"]), ("b", ["n", "m"])], ["n"]),  # a diagonal, not a product
    ([("a", ["n", "m"])], ["m"]),
])
def test_not_one_matrix_product(terms, out):
    assert matmul_code(terms, out) is None


@pytest.mark.parametrize("a_labels,w_labels,out,spec", [
    ("xq", "qhc", "hxc", "...xq,qhc->...hxc"),  # a query's heads: the product, then a swap
    ("xq", "qhc", "xhc", "...xq,qhc->...xhc"),
    ("xq", "qhc", "chx", "...xq,qhc->...chx"),
    ("xq", "qhc", "hcx", "...xq,qhc->...hcx"),  # a rotation of three: movedim
    ("xq", "qm", "xm", "...xq,qm->...xm"),
    ("q", "qhc", "ch", "...q,qhc->...ch"),
])
def test_a_weight_holding_the_summed_axis_first(a_labels, w_labels, out, spec):
    sizes = {"x": 3, "q": 4, "h": 5, "c": 6, "m": 7}
    g = torch.Generator().manual_seed(1)
    a = torch.randn(2, *[sizes[c] for c in a_labels], generator=g, dtype=torch.float64)
    w = torch.randn(*[sizes[c] for c in w_labels], generator=g, dtype=torch.float64)
    code = matmul_code([("a", list(a_labels), True), ("w", list(w_labels), False)], list(out))
    assert code is not None and code.startswith("torch.matmul(a, w")
    got = _run(code, a=a, w=w)
    want = torch.einsum(spec, a, w)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("terms,out", [
    ([("a", ["x", "q"], True), ("w", ["h", "q", "c"], False)], ["h", "x", "c"]),  # k not first
    ([("a", ["q", "x"], True), ("w", ["q", "c"], False)], ["x", "c"]),  # k not a's last
    ([("a", ["g", "j"], True), ("w", ["g", "o", "j"], False)], ["g", "o"]),  # a shared axis
    ([("a", ["x", "q"], True), ("w", ["q"], False)], ["x"]),  # nothing of the weight's own
    ([("w", ["q", "c"], False), ("a", ["x", "q"], True)], ["x", "c"]),  # the weight first
])
def test_not_a_weight_product(terms, out):
    assert matmul_code(terms, out) is None
