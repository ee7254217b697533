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
* **Weight bytes** (learned real arrays; naturals stay INT64, 8 bytes): float32 4, bfloat16 2,
  MXFP8 1 per element plus one UE8M0 byte per 32 consecutive elements of the trailing axis
  (``ceil(last / 32)`` scales per row), MXFP4 half a byte per element packed two to a byte
  (``ceil(last / 2)`` bytes per row) plus the same scales.
* **FLOPs**: work on a ``SparseAxis`` counts its ``k`` live positions; every other axis counts its
  storage length (window slots ``w|x`` included: the steady state of a long sequence).
  Contractions exactly: a ``Linear`` is ``2 * in * out`` per degree index (``+ out`` for a bias),
  an expert/group bank (an output axis repeating a degree axis, kept by the ``View<diag>`` that
  follows) counting one slab per degree index; an ``Einops`` over ``n`` operands with summed
  groups costs ``n`` per term (``n - 1`` products and one accumulation: ``2 * MACs`` for two),
  without groups ``n - 1`` per output element. Complex products count 6, complex additions 2.
  Elementwise ``Arithmetic``: one per operation of its formula that involves the operand (an
  ``n``-ary sum or product ``n - 1``, every power and function one; constant parts are folded).
  ``TypeConvert``: 1 per element, 4 to a block-scaled format (magnitude, group maximum,
  division by the scale, rounding). ``Normalize``: 3 per element (square, accumulate, scale),
  +1 each for gain and bias, +3 per normalised group (mean, epsilon, reciprocal root).
  ``L1Norm``: 2 per element (+1 per group for a non-zero epsilon). ``SoftMax`` 5 per element.
  ``AdditionOp``: ``n - 1`` per element. ``Maximum``, ``BitwiseXor``, ``TopK``: 1 per input
  element. ``Modulo``, ``Select``, ``GenericOperator``, older ``Elementwise``: 1 per element.
  Views, concatenations, casts of naturals, complex pairing, lookups and sources (fixed arrays,
  rotary tables, nullary ``Linear``): 0.
* **Arrays**: every output of every operator, at its storage length, lifted over the degrees of
  the boxes around it (a bank ``Linear`` counts its diagonal, as the interpreter fuses it).
* **Decoder state**: an input read through an affine index map that reaches back along the token
  axis (the window ``w|x`` of the latents, the n-gram look-back ``L|x``) must be kept for the
  ``window - 1`` previous tokens when decoding one token at a time: per token its slice (the
  input without the token axis), in its wire's storage format.

A token axis is one whose name's ``code_form`` is ``tokens`` (or, in specs without code forms, an
axis labelled ``x``); a call's token count is the product of the token axes in its domain (1
when the morphism runs per token).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy

from .axes import Axis, SparseAxis
from .datatypes import Complex, Datatype, Encoding, Natural, Quantified, kind, strip
from .morphisms import Block, Broadcasted, Morphism, StrideMorphism, Truncated
from .operators import (
    AdditionOp,
    Arithmetic,
    BitwiseXor,
    BlockOperator,
    Einops,
    Elementwise,
    GenericOperator,
    L1Norm,
    Linear,
    Maximum,
    Modulo,
    Normalize,
    ParaBlockOperator,
    Select,
    SoftMax,
    TopK,
    TypeConvert,
    WeightedTriangularLower,
)
from .params import param_roles

ZERO, ONE = sympy.Integer(0), sympy.Integer(1)

FORMATS = ("float32", "bfloat16", "mxfp8", "mxfp4")
"""Storage formats of learned weights, in the order reports list them."""

FORMAT_ALIASES = {"fp32": "float32", "f32": "float32", "bf16": "bfloat16", "fp8": "mxfp8",
                  "fp4": "mxfp4"}

_ENCODING_BYTES = {Encoding.FP32: 4, Encoding.FP16: 2, Encoding.BF16: 2, Encoding.E5M2: 1,
                   Encoding.E4M3: 1, Encoding.E2M1: sympy.Rational(1, 2), Encoding.UE8M0: 1,
                   Encoding.INT64: 8, Encoding.INT32: 4}


def format_name(text: str) -> str:
    """The canonical name of a weight format (``bf16`` -> ``bfloat16``); ValueError if unknown."""
    key = text.strip().lower()
    key = FORMAT_ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"unknown weight format {text!r} (known: {', '.join(FORMATS)})")
    return key


def weight_bytes(shape: tuple, fmt: str, lead: int = 0) -> sympy.Expr:
    """Bytes of a real array of ``shape`` held in weight format ``fmt``. Block scales group
    runs of 32 along the grouped run (:func:`scale_layout`): the ``lead`` leading axes
    flattened when ``lead`` > 0 (a ``Linear`` weight's input axes, the axes it contracts), else
    the trailing axis; a partial last group still takes a scale."""
    n = sympy.Mul(*shape) if shape else ONE
    if fmt == "float32":
        return 4 * n
    if fmt == "bfloat16":
        return 2 * n
    rows, run = scale_layout(shape, lead)
    scales = rows * sympy.ceiling(run / 32)
    if fmt == "mxfp8":
        return n + scales
    if fmt == "mxfp4":
        return rows * sympy.ceiling(run / 2) + scales
    raise ValueError(f"unknown weight format {fmt!r}")


def scale_layout(shape: tuple, lead: int = 0) -> tuple:
    """(rows, run): the array seen as ``rows`` independent runs of ``run`` values that block
    scales group: the ``lead`` leading axes flattened (``lead`` > 0), else the trailing axis."""
    shape = tuple(shape)
    if not shape:
        return ONE, ONE
    if 0 < lead < len(shape):
        return _prod(shape[lead:]), _prod(shape[:lead])
    if lead >= len(shape):
        return ONE, _prod(shape)
    return _prod(shape[:-1]), shape[-1]


def weight_lead(b: Broadcasted, role: str) -> int:
    """How many leading axes of a parameter of ``b`` block scales group along: a ``Linear``
    weight's input target axes (the axes it contracts); 0 (the trailing axis) otherwise."""
    if role == "weight" and isinstance(b.operator, Linear):
        return sum(len(w.target) for w in b.input_weaves)
    return 0


def element_bytes(dt: Datatype) -> sympy.Expr:
    """Bytes per element of a wire in its declared storage format: the element encoding plus a
    block scale's share; bare reals count 4 (float32), bare naturals 8 (int64)."""
    if isinstance(dt, Complex):
        return 2 * element_bytes(dt.base)
    if isinstance(dt, Quantified):
        out = sympy.sympify(_ENCODING_BYTES[dt.form])
        if dt.scale is not None:
            out += sympy.sympify(_ENCODING_BYTES[dt.scale.form]) / (dt.scale.channels
                                                                     * dt.scale.rows)
        return out
    if isinstance(strip(dt), Natural):
        return sympy.Integer(8)
    return sympy.Integer(4)


def is_token_axis(axis: Axis) -> bool:
    name = axis.name
    if name is None:
        return False
    if name.code_form:
        return name.code_form.removesuffix("_size") == "tokens"
    return name.text == "x"


def tokens_of(objects) -> sympy.Expr:
    """Token count of a dom tuple: the product of its distinct token axes (1 if none)."""
    seen = {}
    for o in objects:
        for a in getattr(o, "shape", ()):
            if is_token_axis(a):
                seen[a.uid] = a.size
    return sympy.Mul(*seen.values()) if seen else ONE


def _work(axis: Axis) -> sympy.Expr:
    """Positions of ``axis`` that computation visits: a top-k sparse axis its ``k`` live ones."""
    return axis.activity if isinstance(axis, SparseAxis) else axis.size


def _prod(xs) -> sympy.Expr:
    xs = list(xs)
    return sympy.Mul(*xs) if xs else ONE


@dataclass(frozen=True)
class ArrayCost:
    """One materialised array: the axes it is stored on (boxes' degrees first)."""

    label: str
    path: str
    axes: tuple[Axis, ...]
    datatype: Datatype

    @property
    def elements(self) -> sympy.Expr:
        return _prod(a.size for a in self.axes)

    @property
    def bytes(self) -> sympy.Expr:
        return self.elements * element_bytes(self.datatype)


@dataclass(frozen=True)
class ParamCost:
    """One learned or fixed array of an operator, ``count`` times (iterations of a repeated
    block); ``block`` is the title of the nearest enclosing block."""

    label: str
    path: str
    shape: tuple[sympy.Expr, ...]
    datatype: Datatype
    learned: bool
    count: sympy.Expr = ONE
    block: str | None = None
    lead: int = 0

    @property
    def elements(self) -> sympy.Expr:
        return _prod(self.shape)

    def bytes_at(self, fmt: str) -> sympy.Expr:
        """Bytes of all its copies held in weight format ``fmt`` (naturals: 8 per element)."""
        if kind(self.datatype) == "natural":
            return 8 * self.count * self.elements
        return self.count * weight_bytes(self.shape, format_name(fmt), self.lead)

    @property
    def name(self) -> str:
        return f"{self.block}/{self.label}" if self.block else self.label


@dataclass(frozen=True)
class StateCost:
    """What a decoder keeps for one look-back read: ``slice`` elements per token for the
    ``window - 1`` previous tokens, ``count`` times (iterations of a repeated block)."""

    label: str
    path: str
    slice: sympy.Expr
    window: sympy.Expr
    datatype: Datatype
    count: sympy.Expr = ONE

    @property
    def per_token(self) -> sympy.Expr:
        return self.count * self.slice

    @property
    def elements(self) -> sympy.Expr:
        return self.count * self.slice * (self.window - 1)

    @property
    def bytes(self) -> sympy.Expr:
        return self.elements * element_bytes(self.datatype)


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
        wb = tuple((f, a + b) for (f, a), (_, b) in zip(self.weight_bytes, other.weight_bytes))
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
        d = _prod(_work(a) for a in degree)
        other = _prod(a.size for a in degree if not is_token_axis(a))
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


def _combine(m: Morphism, kids: list[Cost]) -> Cost:
    total = Cost()
    for k in kids:
        total = total + k
    if isinstance(m, Truncated):
        return replace(total, partial=True)
    if isinstance(m, Block):
        named = tuple(p if p.block else replace(p, block=m.title) for p in total.params)
        return replace(total, params=named).repeated(m.tag.repetition)
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
    bank = _bank_axes(b)
    out = []
    for arr in cod:
        axes = list(arr.shape)
        for a in bank:  # the interpreter keeps only the diagonal of a bank
            axes.remove(a)
        out.append(ArrayCost(label, b.path, tuple(axes), arr.datatype))
    return tuple(out)


def _bank_axes(b: Broadcasted) -> tuple[Axis, ...]:
    if not isinstance(b.operator, Linear) or not b.input_weaves or not b.output_weaves:
        return ()
    deg = b.degree
    return tuple(a for a in b.output_weaves[0].target if a in deg)


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
        n = _prod(shape)
        label = (b.operator.label or type(b.operator).__name__) + "." + role
        params.append(ParamCost(label, b.path + ".operator", tuple(shape), dt, is_learned,
                                lead=weight_lead(b, role)))
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
            row = _prod(a.size for a in b.output_weaves[0].target)
            lookups += _prod(_work(a) for a in deg) * row
        elif role == "weight" and isinstance(b.operator, Linear):
            axes = [a for w in b.input_weaves for a in w.target] + list(b.output_weaves[0].target)
            activated += _prod(_work(a) for a in axes)
        else:
            activated += n
    flops = _prod(_work(a) for a in deg) * _flops(b)
    mm = flops if _is_contraction(b) else ZERO
    return Cost(learned, fixed, activated, lookups, flops, mm, tuple((f, wb[f]) for f in FORMATS),
                nat, _outputs(b), _state(b), tuple(params))


def _is_contraction(b: Broadcasted) -> bool:
    """A ``Linear`` with an input, or an ``Einops`` with a group summed over two or more
    operands: the work a matrix multiply does."""
    op = b.operator
    if isinstance(op, Linear):
        return bool(b.input_weaves)
    if isinstance(op, Einops):
        return len(b.input_weaves) >= 2 and any(op.signature)
    return False


def _target_work(w) -> sympy.Expr:
    return _prod(_work(a) for a in w.target)


def _flops(b: Broadcasted) -> sympy.Expr:
    """FLOPs per degree index of a non-box operator (rules in the module docstring)."""
    op = b.operator
    ins, outs = b.input_weaves, b.output_weaves
    out_el = _target_work(outs[0]) if outs else ONE
    in_el = _target_work(ins[0]) if ins else ONE
    cplx = any(kind(w.datatype) == "complex" for w in ins)
    mul, add = (6, 2) if cplx else (1, 1)
    if isinstance(op, Linear):
        if not ins:
            return ZERO
        bank = set(_bank_axes(b))
        inner = _prod(_target_work(w) for w in ins)
        outer = _prod(_work(a) for a in outs[0].target if a not in bank)
        return 2 * inner * outer + (outer if op.bias else ZERO)
    if isinstance(op, Einops):
        groups: dict[int, Axis] = {}
        for w, sig in zip(ins, op.signature):
            for g, a in zip(sig, w.target):
                groups.setdefault(g, a)
        n = len(ins)
        if groups:
            return _prod(_work(a) for a in groups.values()) * ((n - 1) * mul + add)
        return sympy.Integer(max(n - 1, 0) * mul)
    if isinstance(op, Arithmetic):
        return sympy.Integer(formula_ops(op.formula)) * out_el
    if isinstance(op, TypeConvert):
        tgt = op.target if op.target is not None else (outs[0].datatype if outs else None)
        scaled = isinstance(tgt, Quantified) and tgt.scale is not None
        return (4 if scaled else 1) * out_el
    if isinstance(op, Normalize):
        per = 3 + int(op.gain) + int(op.bias)
        return per * in_el + 3
    if isinstance(op, L1Norm):
        return 2 * in_el + (0 if op.epsilon == 0 else 1)
    if isinstance(op, SoftMax):
        return 5 * in_el
    if isinstance(op, AdditionOp):
        return sympy.Integer(max(len(ins) - 1, 0) * add) * out_el
    if isinstance(op, (Maximum, BitwiseXor, TopK)):
        return in_el
    if isinstance(op, (Modulo, Select, GenericOperator, Elementwise)):
        return out_el
    if isinstance(op, WeightedTriangularLower):
        return 2 * in_el
    return ZERO


def formula_ops(expr) -> int:
    """Operations of an elementwise formula that involve the operand: an n-ary sum or product
    counts n - 1, every power or function 1; constant sub-expressions are folded (0)."""
    from .numeric import FREE_INPUT

    expr = sympy.sympify(expr)
    count = 0
    stack = [expr]
    while stack:
        e = stack.pop()
        if not e.has(FREE_INPUT) or e.is_Atom:
            continue
        if isinstance(e, (sympy.Add, sympy.Mul)):
            live = [a for a in e.args if a.has(FREE_INPUT)]
            count += len(e.args) - 1 if live else 0
            stack.extend(live)
        else:
            count += 1
            stack.extend(a for a in e.args if a.has(FREE_INPUT))
    return count


def _state(b: Broadcasted) -> tuple[StateCost, ...]:
    out = []
    for k, rx in enumerate(b.reindexings):
        window = _lookback(rx)
        if window is None:
            continue
        try:
            arr = b.input_weaves[k].fill(tuple(rx.cod))
        except Exception:  # noqa: BLE001, S112 - ill-typed: validation reports it
            continue
        sl = _prod(a.size for a in arr.shape if not is_token_axis(a))
        label = type(b.operator).__name__ + (f" {b.operator.label}" if b.operator.label else "")
        out.append(StateCost(label, b.path + f".reindexings[{k}]", sl, window, arr.datatype))
    return tuple(out)


def _lookback(rx: Morphism) -> sympy.Expr | None:
    """The look-back window of an index map that reads a token axis at an offset given by
    another axis (``x <- x - j`` over ``j`` in ``w|x``): that axis's size, else None."""
    stack = [rx]
    while stack:
        m = stack.pop()
        if isinstance(m, StrideMorphism):
            for row in m.rows:
                if not is_token_axis(row.axis):
                    continue
                for a, s in zip(m.dom, row.strides):
                    if s != 0 and not is_token_axis(a):
                        return a.size
        stack.extend(c for _, c in m.children())
    return None


__all__ = ["FORMATS", "ArrayCost", "Cost", "ParamCost", "StateCost", "block_costs", "cost", "element_bytes",
           "format_name", "formula_ops", "is_token_axis", "scale_layout", "tokens_of",
           "weight_bytes", "weight_lead",
           "with_tokens"]
