"""A two-operand einsum that is one batched matrix product, written as ``torch.matmul``.

``torch.einsum`` plans its product on every call and may put the result in a layout of its
own (``'...xnm,...xna->...xam'`` came back as a permuted ``[x, m, a]``, which made every later
elementwise op strided); ``torch.matmul`` of the operands, transposed where their last two axes
are the other way round, gives the result in the einsum's order and memory order, the product
HF writes for the mHC's combine (``comb.transpose(-1, -2) @ streams``). A vector times a matrix
(the mHC's collapse ``'...xn,...xnm->...xm'``) is the same product with a row or column of one:
the prelude's ``vecmat(s, h)``, ``torch.matmul(s.unsqueeze(-2), h).squeeze(-2)`` but where the
16-bit batched kernel is slow, or ``torch.matmul(h, s.unsqueeze(-1)).squeeze(-1)``. A
batched operand times a weight that holds the summed axis first (a query's ``'...xq,qhc->...hxc'``)
is a product with the weight's other axes flattened, ``torch.matmul(q, w.flatten(1))``, unflattened
and moved to the output's order."""
from __future__ import annotations

from .emit import atom


def matmul_code(terms: list[tuple], out: list, use=lambda prelude: None) -> str | None:
    """``torch.matmul`` code for the einsum over ``terms`` (``(code, labels[, batched])``) giving
    ``out``, or None where it is not one: two batched operands sharing their leading axes (in the
    output's order, leading it too), one summed axis, and at most one free axis each, as the
    output's last axes (an operand without one is a vector: a row or column of one); or a
    batched operand whose last axis is the one summed times a weight (:func:`weight_code`)."""
    if len(terms) == 2 and [len(t) < 3 or t[2] for t in terms] == [True, False]:
        return weight_code(terms, out)
    if len(terms) != 2 or not all(len(t) < 3 or t[2] for t in terms):
        return None
    (ca, la), (cb, lb) = [(t[0], list(t[1])) for t in terms]
    out = list(out)
    if any(len(set(labs)) != len(labs) for labs in (la, lb, out)):
        return None
    summed = [lab for lab in la if lab in lb and lab not in out]
    shared = [lab for lab in la if lab in lb and lab in out]
    free_a = [lab for lab in la if lab not in lb]
    free_b = [lab for lab in lb if lab not in la]
    n = len(shared)
    if (len(summed) != 1 or len(free_a) > 1 or len(free_b) > 1 or not free_a + free_b
            or len(out) != n + len(free_a + free_b) or la[:n] != shared or lb[:n] != shared
            or out[:n] != shared or set(out[n:]) != {*free_a, *free_b}):
        return None
    k = summed[0]
    if not (free_a and free_b):  # a vector times a matrix, in the matrix's own layout
        (cv, _), (cm, lm) = sorted(((ca, la), (cb, lb)), key=lambda t: len(t[1]))
        if lm[n:] == [k, out[n]]:
            use("linear")
            return f"vecmat({cv}, {cm})"
        return f"torch.matmul({cm}, {atom(cv)}.unsqueeze(-1)).squeeze(-1)"
    if out[n] == free_b[0]:  # b's free axis comes first: b is the left factor
        (ca, la, free_a), (cb, lb, free_b) = (cb, lb, free_b), (ca, la, free_a)
    left = ca if la[n:] == [free_a[0], k] else f"{atom(ca)}.transpose(-2, -1)"
    right = cb if lb[n:] == [k, free_b[0]] else f"{atom(cb)}.transpose(-2, -1)"
    return f"torch.matmul({left}, {right})"


def weight_code(terms: list[tuple], out: list) -> str | None:
    """``torch.matmul`` code for ``a [..., *free_a, k]`` times an unbatched ``w [k, *free_w]``
    giving ``out`` (the free axes in any order), or None where the einsum is not that."""
    (ca, la), (cw, lw) = [(t[0], list(t[1])) for t in terms]
    out = list(out)
    if (len(set(la + lw)) != len(la) + len(lw) - 1 or not la or not lw or la[-1] != lw[0]
            or sorted(out) != sorted(la[:-1] + lw[1:]) or len(set(out)) != len(out)):
        return None
    if len(lw) == 1:  # nothing of the weight's own: a dot product, not worth a matmul
        return None
    code = f"torch.matmul({ca}, {atom(cw)}{'.flatten(1)' if len(lw) > 2 else ''})"
    if len(lw) > 2:
        code += f".unflatten(-1, {atom(cw)}.shape[1:])"
    cur, n = la[:-1] + lw[1:], len(out)
    moved = [(cur.index(lab) - n, i - n) for i, lab in enumerate(out) if cur.index(lab) != i]
    if not moved:
        return code
    if len(moved) == 2 and moved[0] == moved[1][::-1]:  # two axes swapped
        return f"{code}.transpose({moved[0][0]}, {moved[0][1]})"
    src, dst = zip(*moved, strict=True)
    return f"{code}.movedim({src}, {dst})"
