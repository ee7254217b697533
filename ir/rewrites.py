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
``a - Max(a - b, 0)`` (``a - ReLU(a - b)``)        ``Min(a, b)``: exact, where ``a - (a - b)``
                                                 loses ``b``'s low bits once ``a`` is large
==============================================  ===============================================

Reciprocal square roots need no rule: sympy keeps ``1/sqrt(a)`` as ``a^(-1/2)``, printed as one
``rsqrt`` (no intermediate); the overflow of a squared activation inside a norm is a matter of
the precision policy (``codegen/PRECISION.md``).

Softmax spans two operators: ``e^x`` followed by an L1 normalisation with no epsilon over a row
is a softmax of the logits, and :func:`softmax_pair` gives the pair to evaluate instead (the
exponential made the identity, the normalisation a stable :class:`~ir.operators.SoftMax`, which
subtracts the row maximum); :func:`softmax_pairs` applies it to a composition.

A softmax with a sink term spans a whole composition: a row of logits ``x`` (over one axis ``w``)
and a sink logit ``s`` are exponentiated separately, ``z = 1 / (sum_w e^x + e^s)`` and the
result is ``z`` times a contraction of ``e^x`` over ``w``. :func:`stable_composition` finds it
on the composition's data-flow graph (:mod:`ir.dataflow`) and returns the composition with one
:class:`SinkShift` step before the exponentials: both read ``x - M`` and ``s - M``, ``M = max(max
over the live w of x, s)`` per row, so no exponential exceeds 1 and the sink's is 1 at the
worst (the numerator and the denominator both scale by ``e^{-M}``: the same value in real
arithmetic).

Two fusions group a contraction and the ``View`` after it as one :class:`Fused` node that a
backend may compute as one step: a bank ``Linear`` followed by a diagonal ``View`` as a
:class:`BankDiagonal` (:func:`bank_diagonals`, the interpreter's), a contraction followed by a
relabelling ``View`` as a :class:`ContractionView` (:func:`contraction_views`, the code
generator's).

The composition rewrites run once per root, in a named order, in :mod:`ir.pipeline` (no backend
applies them inside its walk); :func:`stable` rewrites one formula (its backends' formula
lowering calls it). Pure sympy: ``ir`` knows nothing of numpy or torch.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import sympy

from . import affine, dataflow
from .arrays import TILED, Weave
from .datatypes import Natural, kind, strip
from .errors import SpecError
from .frozen import quick_init
from .morphisms import Block, Broadcasted, Composed, ProductOfMorphisms, Rearrangement
from .numeric import FREE_INPUT, Sigmoid
from .operators import (
    AdditionOp,
    Arithmetic,
    BlockOperator,
    Einops,
    L1Norm,
    Linear,
    Operator,
    SoftMax,
    TypeConvert,
    View,
)
from .operators.measure import in_work


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


def min_of_difference(e):
    """``a - Max(a - b, 0)`` is ``Min(a, b)``, where ``b`` (``a`` less the ``Max``'s argument)
    is no longer than that argument."""
    if not e.is_Add:
        return None
    for t in e.args:
        if not (t.is_Mul and len(t.args) == 2 and t.args[0] == -1
                and isinstance(t.args[1], sympy.Max) and len(t.args[1].args) == 2
                and sympy.Integer(0) in t.args[1].args):
            continue
        d = next(u for u in t.args[1].args if u != 0)
        a = e - t
        b = sympy.expand(a - d)
        if sympy.count_ops(b) <= sympy.count_ops(d):
            return sympy.Min(a, b)
    return None


RULES = (
    ("log-sum-exp", log_sum_exp),
    ("sigmoid", sigmoid),
    ("sigmoid of a ratio", sigmoid_of_ratio),
    ("log-sigmoid", log_sigmoid),
    ("silu", silu),
    ("min of a difference", min_of_difference),
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


def _is_exp(b) -> bool:
    return (isinstance(b, Broadcasted) and isinstance(b.operator, Arithmetic)
            and len(b.input_weaves) == 1 and len(b.output_weaves) == 1
            and _equal(b.operator.formula, sympy.exp(FREE_INPUT)))


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
    if not (_is_exp(a) and _is_plain_l1(b)):
        return None
    return (replace(a, operator=replace(a.operator, formula=FREE_INPUT)),
            replace(b, operator=SoftMax(name=b.operator.name, path=b.operator.path,
                                        contracted=b.operator.contracted)))


def softmax_pairs(m):
    """``m`` (a composition) with every adjacent ``e^x ; L1`` pair replaced by its
    :func:`softmax_pair`; ``m`` itself when it holds none."""
    if not isinstance(m, Composed) or isinstance(m, Fused):
        return m
    items, out, i, changed = m.content, [], 0, False
    while i < len(items):
        pair = softmax_pair(items[i], items[i + 1]) if i + 1 < len(items) else None
        if pair:
            out.extend(pair)
            i, changed = i + 2, True
        else:
            out.append(items[i])
            i += 1
    return replace(m, content=tuple(out)) if changed else m


@quick_init
@dataclass(frozen=True, eq=False)
class Fused(Composed):
    """``content = (contraction, view)``: a composition a backend may compute as one step. The
    same computation as the plain composition (every walk that does not know the kind reads it
    as one); each subclass states the pattern and is introduced by one pass of
    :mod:`ir.pipeline`."""

    @property
    def contraction(self) -> Broadcasted:
        return self.content[0]  # type: ignore[return-value]  # _grouped builds it so

    @property
    def view(self) -> Broadcasted:
        return self.content[1]  # type: ignore[return-value]  # _grouped builds it so


@quick_init
@dataclass(frozen=True, eq=False)
class BankDiagonal(Fused):
    """A bank ``Linear`` (its output target repeats an axis of its own degree: ``W^{D}`` has
    input ``[*, f]`` over degree ``(k/e)`` and output ``[*, k/e, m]``) followed by a ``View``
    keeping the diagonal; a backend may compute it as one contraction ``y[e, m] = sum_f x[e, f]
    W[f, e, m]`` that never holds the ``|e|^2``-sized intermediate (introduced by
    :func:`bank_diagonals`)."""

    @property
    def linear(self) -> Broadcasted:
        return self.contraction


@quick_init
@dataclass(frozen=True, eq=False)
class ContractionView(Fused):
    """A contraction (a ``Linear``, or an ``Einops`` with a signature) with one real result,
    followed by a ``View`` that reads every dim of that result, each as a plain relabelling of
    one of its degree dims (stride 1, no shift, no range condition); a backend may write both
    as one contraction that places its result where the View puts it, never holding the
    contraction's own result (introduced by :func:`contraction_views`). Whether a relabelled
    dim's axis has the same size as the dim it reads can depend on the binding: a backend
    checks that under its binding and otherwise computes the composition."""


def bank_diagonal(a, b) -> bool:
    """Whether ``a ; b`` is a bank ``Linear`` followed by a diagonal ``View`` over its one
    result (see :class:`BankDiagonal`)."""
    if not (isinstance(a, Broadcasted) and isinstance(b, Broadcasted)):
        return False
    if not (isinstance(a.operator, Linear) and isinstance(b.operator, View)):
        return False
    if len(a.output_weaves) != 1 or not a.input_weaves or len(b.input_weaves) != 1:
        return False
    if any(isinstance(strip(w.datatype), Natural) for w in a.input_weaves):
        return False
    wl = a.output_weaves[0]
    if not any(ax in a.degree for ax in wl.target):
        return False
    rx = b.reindexings[0]
    wv = b.input_weaves[0]
    if not isinstance(rx, Rearrangement) or wv.target or len(rx.mapping) != len(wl.shape):
        return False
    return len(set(rx.mapping)) != len(rx.mapping)


def contraction_view(a, b) -> bool:
    """Whether ``a ; b`` is a contraction followed by a relabelling ``View`` of its one result
    (see :class:`ContractionView`)."""
    if not (isinstance(a, Broadcasted) and isinstance(b, Broadcasted)):
        return False
    if not isinstance(a.operator, (Linear, Einops)) or not isinstance(b.operator, View):
        return False
    if isinstance(a.operator, Einops) and not any(a.operator.signature):
        return False
    if len(a.output_weaves) != 1 or len(b.input_weaves) != 1 or not a.input_weaves:
        return False
    if any(d is not TILED for d in b.input_weaves[0].shape):
        return False
    if kind(a.output_weaves[0].datatype) != "real":
        return False
    try:
        amap = affine.affine_map(b.reindexings[0])
    except SpecError:
        return False  # the View's own lowering reports it
    if amap.constraints or len(amap.cod) != len(a.output_weaves[0].shape):
        return False
    return all(_relabels(amap, j) for j in range(len(amap.cod)))


def _relabels(amap, j: int) -> bool:
    row, shift = amap.row(j)
    return shift == 0 and [s for s in row if s != 0] == [1]


def _grouped(m, match, cls):
    """``m`` (a composition) with every adjacent pair ``match`` accepts grouped as a ``cls``;
    ``m`` itself when it holds none."""
    if not isinstance(m, Composed) or isinstance(m, Fused):
        return m
    items, out, i, changed = m.content, [], 0, False
    while i < len(items):
        if i + 1 < len(items) and match(items[i], items[i + 1]):
            out.append(cls((items[i], items[i + 1]), path=items[i].path))
            i, changed = i + 2, True
        else:
            out.append(items[i])
            i += 1
    if not changed:
        return m
    if len(out) == 1:
        return cls(items, path=m.path)
    return replace(m, content=tuple(out))


def bank_diagonals(m):
    """``m`` (a composition) with every adjacent :func:`bank_diagonal` pair grouped as a
    :class:`BankDiagonal`; ``m`` itself when it holds none."""
    return _grouped(m, bank_diagonal, BankDiagonal)


def contraction_views(m):
    """``m`` (a composition) with every adjacent :func:`contraction_view` pair grouped as a
    :class:`ContractionView`; ``m`` itself when it holds none."""
    return _grouped(m, contraction_view, ContractionView)


@quick_init
@dataclass(frozen=True, eq=False)
class SinkShift(Operator):
    """``(x, s) -> (x - M, s - M)`` with ``M = max(max over the live entries of x's one target
    axis, s)`` per degree position (``M = s`` where no entry is live); ``x - M`` keeps ``x``'s
    liveness, ``s - M`` spans the whole degree. Introduced by :func:`stable_composition`, never
    decoded from a spec."""

    glyph = "shift"
    family = "elementwise"

    def flops(self, b):
        """The joint maximum (one comparison per entry of ``x`` and one with ``s``), then one
        subtraction per entry of ``x`` and one for ``s``: ``2 |x| + 2``."""
        return 2 * in_work(b) + 2


REWRITE_OPERATORS = (SinkShift,)
"""Operator kinds only rewrites introduce (each has an evaluation and a codegen rule too)."""


def _core(step):
    """The one Broadcasted a step computes: itself, or the body of a block (lifted over no
    degree) holding a single Broadcasted; else None."""
    while True:
        if isinstance(step, Block):
            step = step.body
        elif (isinstance(step, Broadcasted) and isinstance(step.operator, BlockOperator)
              and not step.degree):
            step = step.operator.block
        elif isinstance(step, Broadcasted):
            return step
        else:
            return None


@lru_cache(maxsize=4096)
def _equal(a, b) -> bool:
    """``a`` and ``b`` are the same formula up to expansion (cheap: no ``simplify``, which
    takes seconds on the piecewise clamps of the FP8 recipes)."""
    return a == b or sympy.expand(a - b) == 0


def _formula_is(b, formula) -> bool:
    return (b is not None and isinstance(b.operator, Arithmetic) and len(b.input_weaves) == 1
            and len(b.output_weaves) == 1 and _equal(b.operator.formula, formula))


def _einops(b, n_inputs: int) -> bool:
    return (b is not None and isinstance(b.operator, Einops) and len(b.input_weaves) == n_inputs
            and len(b.output_weaves) == 1 and not b.output_weaves[0].target)


def _row_sum(b) -> bool:
    """A sum over the one target axis of one input (the output all degree)."""
    return _einops(b, 1) and len(b.input_weaves[0].target) == 1


def _sink_match(g, i):
    """The sink softmax whose row exponential is step ``i``, as ``(x, s, row_sum, sink_exp,
    add)`` (wires and step indices), or None."""
    steps, core = g.steps, [_core(st) for st in g.steps]
    (e,) = g.writes[i]
    p = g.producer(g.reads[i][0])
    if p is not None and isinstance(core[p].operator if core[p] else None, SinkShift):
        return None  # already shifted
    sums, linear = [], []
    todo = list(g.readers(e))
    while todo:  # e^x feeds one row sum and contractions, perhaps through casts
        r = todo.pop()
        if r < 0:
            return None
        if _row_sum(core[r]):
            sums.append(r)
        elif core[r] is not None and isinstance(core[r].operator, TypeConvert) \
                and len(g.writes[r]) == 1:
            todo.extend(g.readers(g.writes[r][0]))
        elif _einops(core[r], 2):
            linear.append(r)
        else:
            return None
    if len(sums) != 1 or not linear:
        return None
    t = sums[0]
    tb = core[t]
    deg = tb.degree
    if tb.output_weaves[0].shape != (TILED,) * len(deg):
        return None
    adds = g.readers(g.writes[t][0])
    if len(adds) != 1 or not isinstance(steps[adds[0]], Broadcasted) \
            or not isinstance(steps[adds[0]].operator, AdditionOp) \
            or len(g.reads[adds[0]]) != 2:
        return None
    a = adds[0]
    (other,) = [w for w in g.reads[a] if w != g.writes[t][0]] or [None]
    y = g.producer(other) if other is not None else None
    if y is None or not _formula_is(core[y], sympy.exp(FREE_INPUT)) \
            or g.readers(other) != [a]:
        return None
    recips = g.readers(g.writes[a][0])
    if len(recips) != 1 or recips[0] < 0 or not _formula_is(core[recips[0]], 1 / FREE_INPUT):
        return None
    scaled = g.readers(g.writes[recips[0]][0])  # 1/z scales exactly the contractions
    outs = sorted(r for c in linear for r in g.readers(g.writes[c][0]))
    if sorted(scaled) != outs or any(r < 0 or not _einops(core[r], 2) or
                                     any(w.target for w in core[r].input_weaves)
                                     for r in scaled):
        return None
    x, s = g.reads[i][0], g.reads[y][0]
    if any(ax not in deg for ax in g.types[s].shape):
        return None
    first = min(i, y)
    if any((p := g.producer(w)) is not None and p >= first for w in (x, s)):
        return None
    return x, s, t, y, a


def _sink_rewrite(g, i):
    hit = _sink_match(g, i)
    if hit is None:
        return None
    x, s, t, y, a = hit
    tb, yb, ab = _core(g.steps[t]), _core(g.steps[y]), g.steps[a]
    deg = tb.degree
    n = len(deg)
    xt, st = g.types[x].datatype, g.types[s].datatype
    shift = Broadcasted(
        SinkShift(path=tb.path),
        (Weave(xt, tb.input_weaves[0].shape), Weave(st, (TILED,) * len(g.types[s].shape))),
        (Weave(xt, tb.input_weaves[0].shape), Weave(st, (TILED,) * n)),
        (tb.reindexings[0],
         Rearrangement(tuple(deg.index(ax) for ax in g.types[s].shape), deg, path=tb.path)),
        backup_degree=deg, path=tb.path)
    whole = Rearrangement(tuple(range(n)), deg, path=yb.path)
    sink_exp = Broadcasted(yb.operator, (Weave(yb.input_weaves[0].datatype, (TILED,) * n),),
                           (Weave(yb.output_weaves[0].datatype, (TILED,) * n),), (whole,),
                           backup_degree=deg, path=yb.path)
    k = g.reads[a].index(g.writes[y][0])
    j = g.reads[a].index(g.writes[t][0])
    weaves, rxs = list(ab.input_weaves), list(ab.reindexings)
    weaves[k] = Weave(ab.input_weaves[k].datatype, ab.input_weaves[j].shape)
    rxs[k] = ab.reindexings[j]
    add = replace(ab, input_weaves=tuple(weaves), reindexings=tuple(rxs))
    h = dataflow.Dataflow(g.n_inputs, list(g.types[:g.n_inputs]))
    wire = {w: w for w in range(g.n_inputs)}
    first = min(i, y)
    for idx, (step, reads) in enumerate(zip(g.steps, g.reads, strict=True)):
        reads = [wire[r] for r in reads]
        if idx == first:
            x2, s2 = h.add(shift, [wire[x], wire[s]])
        if idx == i:
            reads = [x2]
        elif idx == y:
            step, reads = sink_exp, [s2]
        elif idx == a:
            step = add
        for old, new in zip(g.writes[idx], h.add(step, reads), strict=True):
            wire[old] = new
    h.result = [wire[w] for w in g.result]
    return h


def stable_composition(m):
    """``m`` with every softmax with a sink term shifted by its row maximum (:class:`SinkShift`);
    ``m`` itself when it holds none."""
    if not isinstance(m, Composed) or isinstance(m, Fused) or not any(
            _formula_is(_core(b), sympy.exp(FREE_INPUT)) for b in _leaves(m)):
        return m
    g = dataflow.flatten(m)
    changed = False
    for _ in range(8):
        new = next((h for i, st in enumerate(g.steps)
                    if _formula_is(_core(st), sympy.exp(FREE_INPUT))
                    and (h := _sink_rewrite(g, i)) is not None), None)
        if new is None:
            break
        g, changed = new, True
    return dataflow.rebuild(g, m.path) if changed else m


def _leaves(m):
    if isinstance(m, (Composed, ProductOfMorphisms)):
        for part in m.content:
            yield from _leaves(part)
    else:
        yield m


__all__ = ["REWRITE_OPERATORS", "RULES", "BankDiagonal", "ContractionView", "Fused", "LogSumExp",
           "SiLU", "SinkShift", "bank_diagonal", "bank_diagonals", "contraction_view",
           "contraction_views", "softmax_pair", "softmax_pairs", "stable",
           "stable_composition"]
