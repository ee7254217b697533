"""What a morphism costs, as sympy formulas in its sizes: learned elements, elements activated per
token, weight bytes at each storage format, FLOPs, the arrays it materialises and the state a
decoder keeps. Pure sympy: nothing here allocates, so a repetition of 10**12 or a size of 2**64
costs the same as a small one. Bind the formulas with :meth:`ir.env.Env.subs`.

Counting rules (per call of the morphism; a parent multiplies by its degree and repetition):

* **Learned / fixed elements** as :mod:`ir.params` lists them (parameters are per occurrence and
  per iteration, so a block repeated ``r`` times holds ``r`` times its body's weights).
* **Activated per token**: the weight elements one token touches. A weight axis on a top-k
  ``SparseAxis`` ``k/e`` counts ``k`` of its ``e`` positions; a table (``Embedding``) counts the
  rows the token looks up (lookups per call divided by the call's token count); every other
  learned array counts whole.
* **Weight bytes** of learned real arrays at each format of :mod:`ir.weight_formats`
  (naturals stay INT64, 8 bytes).
* **FLOPs**: per degree index by the operator's own rule (its class's ``flops``, beside it in
  ``ir/operators/``; contractions exactly, ``2 * MACs``; elementwise maps, norms and casts as
  each rule's docstring states), times the degree; work on a top-k ``SparseAxis`` counts its
  ``k`` live positions.
* **Arrays**: every output of every operator, at its storage length, lifted over the degrees of
  the boxes around it (a bank ``Linear`` counts its diagonal, as the interpreter fuses it).
* **Decoder state**: an input read through an affine index map that reaches back along the token
  axis (the window ``w|x`` of the latents, the n-gram look-back ``L|x``; the look-backs of
  :mod:`ir.incremental`, which the generated ``step`` keeps) must be kept for the
  ``window - 1`` previous tokens when decoding one token at a time: per token its slice (the
  input without the token axis), in its wire's storage format.

A token axis is one whose name's ``code_form`` is ``tokens`` (or, in specs without code forms, an
axis labelled ``x``); a call's token count is the product of the token axes in its domain (1
when the morphism runs per token).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy

from .axes import Axis, is_token_axis
from .cost_rules import bank_axes, flops, formula_ops, is_contraction, iterated, prod, work
from .datatypes import Datatype, kind
from .errors import BindingError
from .frozen import quick_init
from .incremental import classify_reindexing
from .morphisms import Block, Broadcasted, CoupledScan, Morphism, Scan, Truncated
from .numeric import TooLarge, bounded
from .operators import BlockOperator, Linear, ParaBlockOperator
from .params import param_roles
from .weight_formats import (
    FORMATS,
    element_bytes,
    format_name,
    scale_layout,
    weight_bytes,
    weight_lead,
)

ZERO, ONE = sympy.Integer(0), sympy.Integer(1)


def tokens_of(objects) -> sympy.Expr:
    """Token count of a dom tuple: the product of its distinct token axes (1 if none)."""
    seen = {}
    for o in objects:
        for a in getattr(o, "shape", ()):
            if is_token_axis(a):
                seen[a.uid] = a.size
    return sympy.Mul(*seen.values()) if seen else ONE


@quick_init
@dataclass(frozen=True)
class ArrayCost:
    """One materialised array: the axes it is stored on (boxes' degrees first)."""

    label: str
    path: str
    axes: tuple[Axis, ...]
    datatype: Datatype

    @property
    def elements(self) -> sympy.Expr:
        return prod(a.size for a in self.axes)

    @property
    def bytes(self) -> sympy.Expr:
        return self.elements * element_bytes(self.datatype)


@quick_init
@dataclass(frozen=True)
class ParamCost:
    """One learned or fixed array of an operator, ``count`` times (iterations of a repeated
    block); ``titles`` are the titles of the blocks around it up to the costed root (like a
    parameter key of :mod:`ir.params`, without its ``~k`` and ``@i`` marks), ``lead`` how many
    leading axes its block scales group along, ``active`` the elements one token reads."""

    label: str
    path: str
    shape: tuple[sympy.Expr, ...]
    datatype: Datatype
    learned: bool
    count: sympy.Expr = ONE
    titles: tuple[str, ...] = ()
    lead: int = 0
    active: sympy.Expr = ONE  # elements one token reads (k of e experts, one table row)

    @property
    def elements(self) -> sympy.Expr:
        return prod(self.shape)

    def bytes_at(self, fmt: str) -> sympy.Expr:
        """Bytes of all its copies held in weight format ``fmt`` (naturals: 8 per element)."""
        if kind(self.datatype) == "natural":
            return 8 * self.count * self.elements
        return self.count * weight_bytes(self.shape, format_name(fmt), self.lead)

    @property
    def name(self) -> str:
        return "/".join(self.titles + (self.label,))


@quick_init
@dataclass(frozen=True)
class StateCost:
    """What a decoder keeps for one look-back read (:mod:`ir.incremental`): ``slice`` elements
    per token for the ``window - 1`` previous tokens, ``count`` times (iterations of a repeated
    block); ``titles`` are the blocks around the read up to the costed root."""

    label: str
    path: str
    slice: sympy.Expr
    window: sympy.Expr
    datatype: Datatype
    count: sympy.Expr = ONE
    titles: tuple[str, ...] = ()

    @property
    def per_token(self) -> sympy.Expr:
        return self.count * self.slice

    @property
    def bytes_per_token(self) -> sympy.Expr:
        """Bytes one token of context adds to this read's state."""
        return self.per_token * element_bytes(self.datatype)

    @property
    def elements(self) -> sympy.Expr:
        return self.count * self.slice * (self.window - 1)

    @property
    def bytes(self) -> sympy.Expr:
        return self.elements * element_bytes(self.datatype)


@quick_init
@dataclass(frozen=True)
class Cost:
    """The cost of one call of a morphism (see the module docstring for the rules)."""

    learned: sympy.Expr = ZERO
    fixed: sympy.Expr = ZERO
    activated: sympy.Expr = ZERO
    lookups: sympy.Expr = ZERO
    flops: sympy.Expr = ZERO
    matmul_flops: sympy.Expr = ZERO
    weight_bytes: tuple[tuple[str, sympy.Expr], ...] = tuple((f, ZERO) for f in FORMATS)
    natural_bytes: sympy.Expr = ZERO
    arrays: tuple[ArrayCost, ...] = ()
    state: tuple[StateCost, ...] = ()
    params: tuple[ParamCost, ...] = ()
    partial: bool = False
    tokens: sympy.Expr = ONE

    def __add__(self, other: Cost) -> Cost:
        wb = tuple((f, a + b) for (f, a), (_, b) in zip(self.weight_bytes, other.weight_bytes, strict=True))
        return Cost(self.learned + other.learned, self.fixed + other.fixed,
                    self.activated + other.activated, self.lookups + other.lookups,
                    self.flops + other.flops, self.matmul_flops + other.matmul_flops, wb, self.natural_bytes + other.natural_bytes,
                    self.arrays + other.arrays, self.state + other.state,
                    self.params + other.params, self.partial or other.partial, self.tokens)

    def bytes_at(self, fmt: str) -> sympy.Expr:
        """Bytes of every learned array in weight format ``fmt`` (naturals at 8 bytes)."""
        return dict(self.weight_bytes)[format_name(fmt)] + self.natural_bytes

    @property
    def activated_per_token(self) -> sympy.Expr:
        return self.activated + self.lookups / self.tokens

    @property
    def flops_per_token(self) -> sympy.Expr:
        return self.flops / self.tokens

    def repeated(self, r) -> Cost:
        """``r`` calls in sequence, each iteration with its own weights."""
        if r == 1:
            return self
        wb = tuple((f, r * b) for f, b in self.weight_bytes)
        return replace(self, learned=r * self.learned, fixed=r * self.fixed,
                       activated=r * self.activated, lookups=r * self.lookups,
                       flops=r * self.flops, matmul_flops=r * self.matmul_flops,
                       weight_bytes=wb,
                       natural_bytes=r * self.natural_bytes,
                       state=tuple(replace(s, count=r * s.count) for s in self.state),
                       params=tuple(replace(p, count=r * p.count) for p in self.params))

    def lifted(self, degree: tuple[Axis, ...]) -> Cost:
        """The cost of running once per index of ``degree`` (weights shared across it)."""
        if not degree:
            return self
        d = prod(work(a) for a in degree)
        other = prod(a.size for a in degree if not is_token_axis(a))
        return replace(self, lookups=d * self.lookups, flops=d * self.flops,
                       matmul_flops=d * self.matmul_flops,
                       arrays=tuple(replace(a, axes=degree + a.axes) for a in self.arrays),
                       state=tuple(replace(s, slice=other * s.slice) for s in self.state))


def cost(root: Morphism) -> Cost:
    """The cost of one call of ``root``, with ``tokens`` set from its domain."""
    memo: dict[int, Cost] = {}
    return with_tokens(_cost(root, memo), root)


def block_costs(root: Morphism) -> dict[int, Cost]:
    """``cost`` of every morphism below ``root`` (memoised by node identity), for per-block
    reports: ``block_costs(root)[id(block)]`` with the block's own token count."""
    memo: dict[int, Cost] = {}
    _cost(root, memo)
    return memo


def with_tokens(c: Cost, node: Morphism) -> Cost:
    """``c`` with the token count of ``node``'s domain (a truncated term's first part's)."""
    return replace(c, tokens=tokens_of(domain(node)))


def domain(node: Morphism) -> tuple:
    """``node.dom``; for a truncated term, the domain of its first recovered part (or ())."""
    while True:
        try:
            return tuple(node.dom)
        except Exception:  # noqa: BLE001 - truncated or ill-typed
            kids = [c for _, c in node.children()]
            if not isinstance(node, Truncated) or not kids:
                return ()
            node = kids[0]


def _cost(node: Morphism, memo: dict[int, Cost]) -> Cost:
    # iterative post-order so that deep specs never hit the recursion limit
    stack = [(node, False)]
    while stack:
        m, ready = stack.pop()
        if id(m) in memo:
            continue
        kids = [c for _, c in m.children()]
        if not ready:
            stack.append((m, True))
            stack.extend((c, False) for c in reversed(kids) if id(c) not in memo)
            continue
        memo[id(m)] = _combine(m, [memo[id(c)] for c in kids])
    return memo[id(node)]


def count(expr, what: str) -> sympy.Expr:
    """A repetition or step count as the cost multiplies by it: its literal parts evaluated
    (within :data:`ir.numeric.MAX_BITS` bits), its symbols kept. A count whose evaluation would
    exceed that (``(10**300)**(10**30)``) raises :class:`~ir.errors.BindingError`: multiplying
    by it unevaluated would make sympy expand it without bound."""
    try:
        return bounded(expr)
    except TooLarge as exc:
        why = str(exc)
        why = why if len(why) <= 120 else why[:60] + " … " + why[-50:]
        raise BindingError(f"the {what[:120]} is too large to count: {why}") from None


def _combine(m: Morphism, kids: list[Cost]) -> Cost:
    total = Cost()
    for k in kids:
        total = total + k
    if isinstance(m, Truncated):
        return replace(total, partial=True)
    if isinstance(m, Scan):  # base once, the step n times on the same weights
        return kids[0] + iterated(kids[1], count(m.n, "step count of a Scan"))
    if isinstance(m, CoupledScan):  # every base once, every step n times
        nb = len(m.bases)
        return sum(kids[:nb], Cost()) + iterated(sum(kids[nb:], Cost()),
                                                 count(m.n, "step count of a CoupledScan"))
    if isinstance(m, Block):
        named = tuple(replace(p, titles=(m.title,) + p.titles) for p in total.params)
        state = tuple(replace(s, titles=(m.title,) + s.titles) for s in total.state)
        r = count(m.tag.repetition, f"repetition of block {m.title!r}")
        return replace(total, params=named, state=state).repeated(r)
    if isinstance(m, Broadcasted):
        if isinstance(m.operator, (BlockOperator, ParaBlockOperator)):
            return total.lifted(m.degree)  # its outputs are its body's, lifted
        return _leaf(m)
    return total


def _outputs(b: Broadcasted) -> tuple[ArrayCost, ...]:
    try:
        cod = b.cod
    except Exception:  # noqa: BLE001 - ill-typed or truncated: nothing to count
        return ()
    label = type(b.operator).__name__ + (f" {b.operator.label}" if b.operator.label else "")
    bank = bank_axes(b)
    out = []
    for arr in cod:
        axes = list(arr.shape)
        for a in bank:  # the interpreter keeps only the diagonal of a bank
            axes.remove(a)
        out.append(ArrayCost(label, b.path, tuple(axes), arr.datatype))
    return tuple(out)


def _leaf(b: Broadcasted) -> Cost:
    try:
        roles = param_roles(b)
    except Exception:  # noqa: BLE001 - validation reports it; the cost model counts nothing
        roles = []
    learned = fixed = activated = lookups = nat = ZERO
    wb = {f: ZERO for f in FORMATS}
    deg = b.degree
    params = []
    for role, shape, _labels, dt, is_learned in roles:
        n = prod(shape)
        label = (b.operator.label or type(b.operator).__name__) + "." + role
        if role == "table":  # a token reads rows of it
            row = prod(a.size for a in b.output_weaves[0].target)
            active = row
        elif role == "weight" and isinstance(b.operator, Linear):
            axes = [a for w in b.input_weaves for a in w.target] + list(b.output_weaves[0].target)
            active = prod(work(a) for a in axes)
        else:
            active = n
        params.append(ParamCost(label, b.path + ".operator", tuple(shape), dt, is_learned,
                                lead=weight_lead(b, role), active=active))
        if not is_learned:
            fixed += n
            continue
        learned += n
        if kind(dt) == "natural":
            nat += 8 * n
        else:
            lead = weight_lead(b, role)
            for f in FORMATS:
                wb[f] += weight_bytes(shape, f, lead)
        if role == "table":
            lookups += prod(work(a) for a in deg) * row
        else:
            activated += active
    done = prod(work(a) for a in deg) * flops(b)
    mm = done if is_contraction(b) else ZERO
    return Cost(learned, fixed, activated, lookups, done, mm, tuple((f, wb[f]) for f in FORMATS),
                nat, _outputs(b), _state(b), tuple(params))


def _state(b: Broadcasted) -> tuple[StateCost, ...]:
    out = []
    for k, rx in enumerate(b.reindexings):
        kind, _row, keep, _reach, _why = classify_reindexing(b, k)
        if kind != "lookback":
            continue
        window = keep + 1
        try:
            arr = b.input_weaves[k].fill(tuple(rx.cod))
        except Exception:  # noqa: BLE001, S112 - ill-typed: validation reports it
            continue
        sl = prod(a.size for a in arr.shape if not is_token_axis(a))
        label = type(b.operator).__name__ + (f" {b.operator.label}" if b.operator.label else "")
        out.append(StateCost(label, b.path + f".reindexings[{k}]", sl, window, arr.datatype))
    return tuple(out)


__all__ = ["FORMATS", "ArrayCost", "Cost", "ParamCost", "StateCost", "block_costs", "cost",
           "domain", "element_bytes", "format_name", "formula_ops",
           "scale_layout", "tokens_of", "weight_bytes", "weight_lead", "with_tokens"]
