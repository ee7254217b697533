"""Numerically safe forms of elementwise formulas (``Arithmetic.formula``).

A formula written the way a paper writes it can overflow where its value is ordinary:
``log(e^x + 1)`` is ``inf`` for ``x > 88`` in float32 (``> 709`` in float64, ``> 11`` in
float16) although it is about ``x``. :func:`stable` rewrites such patterns into functions that
the interpreter and the code generator both evaluate without overflowing an intermediate. Every
rule is an identity in real arithmetic, so the literal formula stays the oracle on ordinary
inputs. One rule per pattern, applied bottom-up until nothing changes:

==============================================  ===============================================
pattern                                          safe form
==============================================  ===============================================
``log(c_1 e^{a_1} + ... + c_k e^{a_k} + c_0)``  ``LogSumExp(a_1 + log c_1, ..., log c_0)``
(``c_i > 0``; ``log(1 + e^a)`` is softplus)     ``= m + log sum e^{a_i - m}``, ``m = max a_i``
``1 / (1 + e^{-a})``                             ``Sigmoid(a)`` (``e^{-|a|}`` only)
``e^{a} Sigmoid(-a)`` (from ``e^a/(1 + e^a)``)   ``Sigmoid(a)``
``a Sigmoid(a)``                                 ``SiLU(a)`` (library SiLU where available)
``log(Sigmoid(a))``                              ``-LogSumExp(-a, 0)``
==============================================  ===============================================

Reciprocal square roots need no rule: sympy keeps ``1/sqrt(a)`` as ``a^(-1/2)``, printed as one
``rsqrt`` (no intermediate); the overflow of a squared activation inside a norm is a matter of
the precision policy (``codegen/PRECISION.md``).

Softmax spans two operators: ``e^x`` followed by an L1 normalisation with no epsilon over a row
is a softmax of the logits, and :func:`softmax_pair` gives the pair to evaluate instead (the
exponential made the identity, the normalisation a stable :class:`~ir.operators.SoftMax`, which
subtracts the row maximum). Interpreter and code generator both apply it, in both modes.

Pure sympy: ``ir`` knows nothing of numpy or torch.
"""
from __future__ import annotations

from dataclasses import replace

import sympy

from .morphisms import Broadcasted
from .numeric import FREE_INPUT, Sigmoid
from .operators import Arithmetic, L1Norm, SoftMax


class LogSumExp(sympy.Function):
    """``log(e^{a_1} + ... + e^{a_k})``, evaluated as ``m + log sum e^{a_i - m}``."""

    @classmethod
    def eval(cls, *args):
        if len(args) == 1:
            return args[0]
        return None


class SiLU(sympy.Function):
    """``a Sigmoid(a)`` (also called swish)."""

    nargs = 1


def _exp_arg(t):
    """``a`` when ``t`` is ``e^a``, else None."""
    if isinstance(t, sympy.exp):
        return t.args[0]
    if t.is_Pow and t.base == sympy.E:
        return t.exp
    return None


def _depends(e) -> bool:
    return FREE_INPUT in e.free_symbols


def log_sum_exp(e):
    """``log(sum c_i e^{a_i} + c_0)`` with positive constant ``c``: a LogSumExp."""
    if not isinstance(e, sympy.log) or len(e.args) != 1 or not e.args[0].is_Add:
        return None
    terms = []
    for t in e.args[0].args:
        coeff, rest = t.as_coeff_Mul()
        a = _exp_arg(rest)
        if a is not None and coeff.is_positive:
            terms.append(a if coeff == 1 else a + sympy.log(coeff))
        elif t.is_number and t.is_positive:
            terms.append(sympy.log(t))
        else:
            return None
    if not any(_depends(a) for a in terms) or not any(_exp_arg(
            t.as_coeff_Mul()[1]) is not None for t in e.args[0].args):
        return None
    return LogSumExp(*sorted(terms, key=sympy.default_sort_key))


def sigmoid(e):
    """``(1 + e^{-a})^{-1}`` is ``Sigmoid(a)``."""
    if not (e.is_Pow and e.exp == -1 and e.base.is_Add and len(e.base.args) == 2):
        return None
    one = [t for t in e.base.args if t == 1]
    rest = [t for t in e.base.args if t != 1]
    if len(one) != 1 or len(rest) != 1:
        return None
    a = _exp_arg(rest[0])
    if a is None or not _depends(a):
        return None
    return Sigmoid(-a)


def sigmoid_of_ratio(e):
    """``e^{a} Sigmoid(-a)`` (what ``e^a / (1 + e^a)`` becomes) is ``Sigmoid(a)``."""
    if not e.is_Mul:
        return None
    exps = [(f, _exp_arg(f)) for f in e.args if _exp_arg(f) is not None]
    sigs = [f for f in e.args if isinstance(f, Sigmoid)]
    for f, a in exps:
        for s in sigs:
            if sympy.simplify(s.args[0] + a) == 0:
                rest = [g for g in e.args if g is not f and g is not s]
                return sympy.Mul(*rest, Sigmoid(a))
    return None


def silu(e):
    """``a Sigmoid(a)`` is ``SiLU(a)``."""
    if not e.is_Mul:
        return None
    sigs = [f for f in e.args if isinstance(f, Sigmoid)]
    for s in sigs:
        a = s.args[0]
        others = [g for g in e.args if g is not s]
        prod = sympy.Mul(*others)
        if prod == a:
            return SiLU(a)
        if a in others:
            rest = list(others)
            rest.remove(a)
            return sympy.Mul(*rest, SiLU(a))
    return None


def log_sigmoid(e):
    """``log(Sigmoid(a))`` is ``-LogSumExp(-a, 0)``."""
    if isinstance(e, sympy.log) and len(e.args) == 1 and isinstance(e.args[0], Sigmoid):
        return -LogSumExp(*sorted((-e.args[0].args[0], sympy.Integer(0)),
                                  key=sympy.default_sort_key))
    return None


RULES = (
    ("log-sum-exp", log_sum_exp),
    ("sigmoid", sigmoid),
    ("sigmoid of a ratio", sigmoid_of_ratio),
    ("log-sigmoid", log_sigmoid),
    ("silu", silu),
)
"""(name, rule): a rule maps one node to its safe form, or None where it does not apply."""


def _rewrite_node(e):
    for _, rule in RULES:
        out = rule(e)
        if out is not None:
            return out
    return None


def stable(expr):
    """``expr`` with every pattern of :data:`RULES` replaced by its safe form (bottom-up,
    repeated until nothing changes). Equal to ``expr`` in real arithmetic."""
    expr = sympy.sympify(expr)
    for _ in range(16):
        new = _bottom_up(expr)
        if new == expr:
            return new
        expr = new
    return expr


def _bottom_up(e):
    if not e.args or e.is_Atom:
        return e
    args = tuple(_bottom_up(a) for a in e.args)
    if args != e.args:
        e = e.func(*args)
    out = _rewrite_node(e)
    return e if out is None else out


_PAIRS: dict[int, tuple] = {}
"""id(exp site) -> (exp site, norm site, substitutes): substitutes live as long as the spec, so
caches keyed by ``id`` never see a recycled id."""


def _is_exp(b) -> bool:
    return (isinstance(b, Broadcasted) and isinstance(b.operator, Arithmetic)
            and len(b.input_weaves) == 1 and len(b.output_weaves) == 1
            and sympy.simplify(b.operator.formula - sympy.exp(FREE_INPUT)) == 0)


def _is_plain_l1(b) -> bool:
    return (isinstance(b, Broadcasted) and isinstance(b.operator, L1Norm)
            and len(b.input_weaves) == 1 and len(b.output_weaves) == 1
            and len(b.input_weaves[0].target) == 1
            and sympy.sympify(b.operator.epsilon) == 0)


def softmax_pair(a, b):
    """``(logits, softmax)`` to evaluate in place of ``a ; b`` when ``a`` is ``e^x`` and ``b``
    an L1 normalisation with no epsilon (``e^x / sum e^x``, which overflows for large logits);
    else None. ``logits`` is ``a`` with the identity formula (same weaves, reindexing and
    storage format), ``softmax`` is ``b`` with a :class:`SoftMax`."""
    hit = _PAIRS.get(id(a))
    if hit is not None and hit[0] is a and hit[1] is b:
        return hit[2]
    if not (_is_exp(a) and _is_plain_l1(b)):
        return None
    subs = (replace(a, operator=replace(a.operator, formula=FREE_INPUT)),
            replace(b, operator=SoftMax(name=b.operator.name, path=b.operator.path,
                                        contracted=b.operator.contracted)))
    _PAIRS[id(a)] = (a, b, subs)
    return subs


__all__ = ["RULES", "LogSumExp", "SiLU", "softmax_pair", "stable"]
