"""Block calls run over chunks of the token axis, so that no wide intermediate is ever whole.

A block is *pointwise* in an axis X (:func:`pointwise`) when every result position depends
only on the same position of X in its operands:

* every operation that sees X runs over it (X is a degree axis) or applies elementwise along
  it (arithmetic, sums of operands, format changes; a nested block that is itself pointwise);
  nothing reduces, contracts, normalises, reshapes or selects along X;
* every read involving X is a plain relabelling of it (no window, shift or stride along X);
* no result is rounded in blocks along X (block scales group the last dim);
* no size, formula or index shift names X's length (its data-fixed symbols: the code reads
  them off the operands, which a chunk cuts), no tape is touched and nothing is cut off.

A call is *chunked* along X (:func:`plan`) when X's length is fixed by the data (the token
count), the block is pointwise in X and it *grows*: an intermediate holds X together with a
window over X (an affine sparse axis X guides) that an operand brings in and no result keeps.
Such an operand costs the caller only the rows it views, while the intermediates grow with
the window (a window attention's ``[x, w|x]`` scores; its result does not). The caller then
runs the block over chunks of X (the prelude ``chunks``: ``chunked``) whose rows come from a
byte budget on the block's widest intermediate per position of X (:attr:`Chunking.width`),
into one preallocated result. Each position is computed from the same operands by the same
code, chunked or not.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy

from ncdc.ir.axes import AffineSparseAxis
from ncdc.ir.morphisms import (
    Block,
    Broadcasted,
    Composed,
    Drop,
    Grab,
    ParaWrap,
    ProductOfMorphisms,
    Truncated,
)
from ncdc.ir.operators import (
    AdditionOp,
    Arithmetic,
    BlockOperator,
    Cast,
    Elementwise,
    Identity,
    TypeConvert,
)
from ncdc.ir.storage import block_scale, output_format
from ncdc.ir.walk import walk

from .affine import affine_map
from .flips import axis_uids, reads_plain
from .names import comment_text

# operators that may see X as one of their own (target) axes: they apply per element
ELEMENTWISE = (AdditionOp, Arithmetic, Cast, Elementwise, Identity, TypeConvert)


@dataclass(frozen=True)
class Chunking:
    """How a call runs over chunks of ``axis``: ``dims[i]`` is the dim (counted from the end)
    of operand ``i`` holding the axis (None: it does not), ``out_dims[j]`` that of returned
    tensor ``j``, ``width`` the size expression of the widest intermediate's elements per
    position of the axis (per position of the call's leading dims)."""

    axis: object
    dims: tuple
    out_dims: tuple
    width: tuple  # sympy expressions; the widest is their maximum
    grows: tuple  # the axes the intermediates grow with (for the comment)


def _free(expr) -> set:
    return sympy.sympify(expr).free_symbols if expr is not None else set()


def _names_length(node: Broadcasted, uid: int, syms: set) -> bool:
    """Whether a size (other than X's own), a formula or an index shift of ``node`` names one
    of ``syms`` (X's length)."""
    for w in list(node.input_weaves) + list(node.output_weaves):
        for a in w.fill(tuple(node.degree)).shape:
            if a.uid != uid and _free(a.size) & syms:
                return True
    op = node.operator
    if dataclasses.is_dataclass(op):
        for f in dataclasses.fields(op):
            v = getattr(op, f.name)
            if isinstance(v, sympy.Basic) and v.free_symbols & syms:
                return True
    for rx in node.reindexings:
        amap = affine_map(rx, constraints_ok=True)
        for j in range(len(amap.cod)):
            row, shift = amap.row(j)
            if any(_free(s) & syms for s in (*row, shift)):
                return True
    return False


def _site_pointwise(node, uid: int, syms: set) -> bool:
    if isinstance(node, (Truncated, Grab, Drop, ParaWrap)):
        return False  # cut off, or a tape read/write (it sees the whole call)
    if not isinstance(node, Broadcasted):
        return True
    if _names_length(node, uid, syms):
        return False
    arrays = [w.fill(tuple(node.degree))
              for w in list(node.input_weaves) + list(node.output_weaves)]
    if not any(uid in axis_uids(a) for a in arrays):
        return True
    if not reads_plain(node, {uid}):
        return False
    sees = any(uid in {a.uid for a in w.target}
               for w in list(node.input_weaves) + list(node.output_weaves))
    if sees and not isinstance(node.operator, (*ELEMENTWISE, BlockOperator)):
        return False  # it reduces, contracts, normalises or reshapes along X
    for j, weave in enumerate(node.output_weaves):
        dt = output_format(node, j)
        if dt is not None and block_scale(dt) is not None and weave.shape \
                and weave.fill(tuple(node.degree)).shape[-1].uid == uid:
            return False
    return True


def pointwise(gen, block, axis) -> bool:
    """Whether every result position of ``block`` depends only on the same position of
    ``axis`` in its operands (memoised per block structure)."""
    cache = gen.__dict__.setdefault("_pointwise", {})
    key = (gen.key_of(block), axis.uid)
    if key not in cache:
        syms = _free(axis.size) & gen.data_symbols  # read off the (chunked) operands
        try:
            ok = all(_site_pointwise(s.node, axis.uid, syms) for s in walk(block.body))
        except Exception:  # noqa: BLE001 - an unreadable map: not provably pointwise
            ok = False
        cache[key] = ok
    return cache[key]


def _results(m, outer: tuple = ()):
    """The axes of every intermediate result in ``m``: each Broadcasted's outputs, with the
    degrees of the blocks it runs inside (a nested block's results exist at each of them)."""
    if isinstance(m, (Composed, ProductOfMorphisms)):
        for p in m.content:
            yield from _results(p, outer)
    elif isinstance(m, (Block, ParaWrap)):
        yield from _results(m.body, outer)
    elif isinstance(m, Broadcasted):
        deg = tuple(m.degree)
        if isinstance(m.operator, BlockOperator):
            yield from _results(m.operator.block, outer + deg)
        for w in m.output_weaves:
            yield outer + w.fill(deg).shape


def _window_over(a, axis) -> bool:
    """Whether ``a`` is a window over ``axis`` (an affine sparse axis it guides): an operand
    holding it is a view of rows of the caller's array, so only intermediates grow with it."""
    return isinstance(a, AffineSparseAxis) and any(g.uid == axis.uid for g in a.guides)


def _at_least(f, e) -> bool:
    """Whether the size ``f`` is surely at least ``e`` (every size is at least 1): their ratio
    is a coefficient >= 1 times positive powers of sizes."""
    coeff, rest = sympy.sympify(f / e).as_coeff_Mul()
    return coeff >= 1 and all(s.is_Symbol and p.is_positive
                              for s, p in rest.as_powers_dict().items() if s != 1)


def _widest(exprs: list) -> tuple:
    """The expressions no other is surely at least as large as, sorted."""
    uniq = sorted(set(exprs), key=sympy.default_sort_key)
    return tuple(e for i, e in enumerate(uniq)
                 if not any(_at_least(f, e) and (j < i or not _at_least(e, f))
                            for j, f in enumerate(uniq) if j != i))


def _grows(block, axis) -> tuple[tuple, tuple]:
    """(the widths, elements per position of ``axis``, of ``block``'s intermediates that hold
    ``axis``; the windows over ``axis`` among their axes that an operand brings and no result
    keeps)."""
    kept = {a.uid for arr in block.cod for a in arr.shape}
    brought = {a.uid: a for arr in block.dom for a in arr.shape
               if a.uid not in kept and _window_over(a, axis)}
    widths, grows = [], {}
    for axes in _results(block.body):
        others = {a.uid: a for a in axes if a.uid != axis.uid}
        if len(others) == len(axes):
            continue  # does not hold the axis
        grows.update((u, brought[u]) for u in others if u in brought)
        widths.append(sympy.Mul(*(sympy.sympify(a.size) for a in others.values())))
    return _widest(widths), tuple(grows[u] for u in sorted(grows))


def chunk_axis(gen, block):
    """(axis, widths, grown axes) for the first axis of ``block``'s operands (in order) whose
    length the data fixes (the token count), that a result keeps, that ``block`` is pointwise
    in and along which it grows; None when there is none."""
    seen = set()
    for arr in block.dom:
        for axis in arr.shape:
            if axis.uid in seen or not _free(axis.size) & gen.data_symbols:
                continue
            seen.add(axis.uid)
            if not any(axis.uid in axis_uids(a) for a in block.cod):
                continue
            try:
                width, grows = _grows(block, axis)
            except Exception:  # noqa: BLE001, S112 - an ill-typed result: not chunked
                continue
            if grows and pointwise(gen, block, axis):
                return axis, width, grows
    return None


def plan(cb, block, wires: list, info) -> Chunking | None:
    """How a call of ``block`` (class ``info``) on ``wires`` runs over chunks
    (:func:`chunk_axis`), or None: also when it touches the tape, takes forward sizes or
    rotary tables, or passes pairs arrays."""
    if (info.uses_tape or info.kw_symbols or info.tables
            or any(w.pairs is not None for w in wires)):
        return None
    found = chunk_axis(cb.gen, block)
    if found is None:
        return None
    axis, width, grows = found
    return Chunking(axis, _dims([w.array for w in wires], axis), _out_dims(info, axis),
                    width, grows)


def _dims(arrays, axis) -> tuple:
    out = []
    for arr in arrays:
        pos = [p for p, a in enumerate(arr.shape) if a.uid == axis.uid]
        out.append(pos[0] - len(arr.shape) if pos else None)
    return tuple(out)


def _out_dims(info, axis) -> tuple:
    """The axis's dim in every tensor the call returns (each output, then its mask)."""
    out = []
    for arr, st, _ in info.outputs:
        d = _dims([arr], axis)[0]
        out.append(d)
        if st is not None:
            out.append(d)
    return tuple(out)


def call_line(cb, c: Chunking, block, callee: str, wires: list, info, target: tuple,
              comment: str) -> None:
    """Emit ``target = chunked(callee, *operands, ...)``: the call of ``block`` run over chunks
    of ``c.axis`` (its operands as :func:`codegen.calls.call_block` passes them)."""
    cb.gen.prelude.add("chunks")
    args, dims = [], []
    for w, st, d in zip(wires, info.input_static, c.dims, strict=False):
        args.append(w.var)
        dims.append(d)
        if st is not None:
            args.append(w.live if w.live is not None
                        else f"torch.ones({(1,) * w.rank!r}, dtype=torch.bool)")
            dims.append(d)
    widths = [cb.sizes.fwd(e) for e in c.width] or ["1"]
    width = widths[0] if len(widths) == 1 else f"max({', '.join(widths)})"
    grown = ", ".join(comment_text(a.label, 20) for a in c.grows)
    cb.fw.comment(f"{comment_text(block.title)} over chunks of "
                  f"{comment_text(c.axis.label, 20)}: its intermediates grow with {grown}")
    cb.fw.assign(target, f"chunked({callee}, {', '.join(args)}, dims={_tuple(dims)}, "
                 f"out_dims={_tuple(c.out_dims)}, width={width})", comment)


def _tuple(values) -> str:
    return "(" + ", ".join(str(v) for v in values) + ("," if len(values) == 1 else "") + ")"
