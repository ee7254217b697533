"""The size gate: every size, repetition, stride and index bound before any work is done.

A spec may state sizes as literals (``-3``, ``π``, ``√2``, ``2**70``, ``3**(2**63)``) or as
symbols bound later (``--size k=-1``, a name exponent ``m^{99…9}``). Whatever can be evaluated
— literals always, symbols once bound — is checked here, and a problem is an error diagnostic
(code ``size-invalid``) naming the symbol(s), where their values come from, and what they
would shape:

* an axis size is an integer, ``1 <= n <= 2**63 - 1``: an empty axis (size 0) is refused, so
  no backend meets an array without elements (a mean or an initialisation bound over none);
* every array (operands, results, tape slots, parameters) has at most ``2**63 - 1`` elements;
* a block repetition is an integer, ``1 <= r <=`` :data:`~ir.params.MAX_REPETITION`
  (parameters are kept per iteration, so ncdc unrolls repetitions; beyond that bound it would
  only exhaust memory);
* stride-row strides and shifts and natural bounds are integers within int64.

Evaluation is bounded (:func:`ir.numeric.bounded`), so a size of ``2**(2**63)`` is refused in
microseconds. ``validate`` reports these diagnostics; ``eval``, ``compile`` and ``check`` run
the same validation before any work and refuse on its first error (``ncdc.commands.common``),
so the two always agree.
"""
from __future__ import annotations

import sympy

from ncdc.ir.arrays import Array, Weave
from ncdc.ir.axes import Axis
from ncdc.ir.datatypes import Complex, Natural, Quantified
from ncdc.ir.env import Env
from ncdc.ir.errors import BindingError, SpecError
from ncdc.ir.morphisms import Block, Broadcasted, StrideMorphism
from ncdc.ir.numeric import INT64_MAX, FreeNumeric
from ncdc.ir.params import MAX_REPETITION, param_roles
from ncdc.ir.shapes import array_text

_EMPTY = Env()


class _Gate:
    def __init__(self, ck, binding):
        self.ck = ck
        self.env = binding.env if binding is not None else _EMPTY
        self.sources = dict(binding.sources) if binding is not None else {}
        self.axis_sizes: dict[int, int | None] = {}
        self.reported: set[tuple] = set()
        self.arrays: dict[int | tuple[int, ...], object] = {}
        """The arrays checked, by id and by the ids of their datatype and axes (kept alive, so
        the ids stay unique): a check depends only on those, and what it reports is reported
        once (``reported``), so an array of the same datatype and axes met again is
        skipped."""

    # ---- evaluation

    def value(self, expr) -> int | None:
        """The exact integer value of ``expr``, None when a symbol in it is unbound; raises
        :class:`BindingError` when it is not an int64 integer."""
        expr = sympy.sympify(expr)
        if any(s not in self.env for s in expr.free_symbols):
            return None
        return self.env.size(expr)

    def origin(self, expr) -> str:
        syms = sorted((s for s in expr.free_symbols if isinstance(s, FreeNumeric)),
                      key=lambda s: (s.label, s.uid))
        if not syms:
            return "a literal in the spec"
        parts = []
        for s in syms[:4]:
            src = self.sources.get(s, "")
            where = src if src.startswith("given") else (
                f"{src}, symbol at {s.path}" if src else f"symbol at {s.path}")
            parts.append(f"{s.label} ({where})")
        return "from " + ", ".join(parts)

    def error(self, key, message, path, titles, axes=()) -> None:
        if key in self.reported:
            return
        self.reported.add(key)
        self.ck.error("size-invalid", message, path, titles, axes)

    # ---- checks

    def axis(self, a: Axis, shapes: str | _ArrayText, path, titles) -> int | None:
        if a.uid in self.axis_sizes:
            return self.axis_sizes[a.uid]
        self.axis_sizes[a.uid] = None
        try:
            n = self.value(a.size)
        except BindingError as exc:
            self.error(("axis", a.uid), f"the size of axis {a.label}: {exc.message}; "
                       f"{self.origin(a.size)}; it shapes {shapes}", path, titles, (a.label,))
            return None
        if n is not None and n < 1:
            why = "below zero" if n < 0 else "an empty axis (every axis holds at least one " \
                "element)"
            self.error(("axis", a.uid), f"the size of axis {a.label} is {n}, {why}; "
                       f"{self.origin(a.size)}; it shapes {shapes}", path, titles, (a.label,))
            return None
        self.axis_sizes[a.uid] = n
        return n

    def array(self, arr, path, titles) -> None:
        if id(arr) in self.arrays:  # (the same object: a join's two sides, a whole's parts)
            return
        if isinstance(arr, Axis):
            self.axis(arr, f"axis {arr.label}", path, titles)
            return
        if isinstance(arr, Weave):
            dt, shape = arr.datatype, tuple(arr.target)
        elif isinstance(arr, Array):
            dt, shape = arr.datatype, arr.shape
        else:
            return
        self.arrays[id(arr)] = arr
        key = (id(dt), *map(id, shape))
        if key in self.arrays:
            return
        self.arrays[key] = arr
        text = _ArrayText(dt, shape)
        self.natural(dt, text, path, titles)
        sizes = [self.axis(a, text, path, titles) for a in shape]
        known = [n for n in sizes if n is not None]
        if len(known) < len(sizes):
            return
        total = 1
        for n in known:
            total *= n
        if total > INT64_MAX:
            self.elements(shape, known, text, path, titles,
                          ("array",) + tuple(a.uid for a in shape))

    def elements(self, axes, sizes, what, path, titles, key=None) -> None:
        if any(n is None for n in sizes):
            return
        total = 1
        for n in sizes:
            total *= n
        if total > INT64_MAX:
            labels = tuple(a.label if isinstance(a, Axis) else str(a) for a in axes)
            self.error(key or ("array", what, path), f"{what} would hold {_big(total)} elements, "
                       f"beyond int64 ({', '.join(f'{lab}={n}' for lab, n in zip(labels, sizes, strict=True))})",
                       path, titles, labels)

    def natural(self, dt, what, path, titles) -> None:
        """A natural bound is an exclusive bound on values, not a size: any whole number
        from 0 (values are stored as int64; the interpreter draws below ``min(bound, 2**63)``)."""
        while isinstance(dt, (Quantified, Complex)):
            dt = dt.wraps if isinstance(dt, Quantified) else dt.base
        if not isinstance(dt, Natural) or dt.max_value.has(sympy.oo):
            return
        expr = dt.max_value
        if any(s not in self.env for s in expr.free_symbols):
            return
        key = ("nat", str(dt))
        try:
            n = self.env.subs(expr)
        except BindingError as exc:
            self.error(key, f"the bound of {dt}: {exc.message}; {self.origin(expr)}; it types "
                       f"{what}", path, titles)
            return
        if not (n.is_finite and n.is_extended_real and n.is_nonnegative):
            self.error(key, f"the bound of {dt} is {_text(n)}, not a number from 0; "
                       f"{self.origin(expr)}; it types {what}", path, titles)

    def number(self, expr, what, path, titles) -> None:
        try:
            self.value(expr)
        except BindingError as exc:
            self.error(("num", path, what), f"{what}: {exc.message}; {self.origin(expr)}",
                       path, titles)

    def repetition(self, b: Block, path, titles) -> None:
        rep = sympy.sympify(b.tag.repetition)
        try:
            r = self.value(rep)
        except BindingError as exc:
            self.error(("rep", path), f"the repetition of block {b.title!r}: {exc.message}; "
                       f"{self.origin(rep)}", path, titles)
            return
        if r is None or isinstance(rep, sympy.Integer) and r < 1:
            return  # a literal below 1 is check_block's ``block-repetition``
        if r < 1:
            self.error(("rep", path), f"block {b.title!r} repeats {r} times; "
                       f"{self.origin(rep)}", path, titles)
        elif r > MAX_REPETITION:
            self.error(("rep", path), f"block {b.title!r} repeats {r} times, beyond "
                       f"{MAX_REPETITION}: ncdc keeps parameters per iteration and unrolls "
                       f"repetitions; {self.origin(rep)}", path, titles)

    def params(self, node: Broadcasted, path, titles) -> None:
        try:
            roles = param_roles(node)
        except SpecError:
            return  # an ill-formed operator: its own check reports it
        for role, shape, labels, _dt, _learned in roles:
            what = f"the {role} of {type(node.operator).__name__} [{', '.join(labels)}]"
            sizes = []
            for lab, s in zip(labels, shape, strict=True):
                try:
                    n = self.value(s)
                except BindingError as exc:
                    self.error(("param", path, role, lab), f"{what}, axis {lab}: "
                               f"{exc.message}; {self.origin(sympy.sympify(s))}", path, titles)
                    n = None
                sizes.append(n)
            self.elements(labels, sizes, what, path, titles)


def check_sizes(ck, sites, binding=None) -> None:
    """Every evaluable size, repetition, stride and bound of ``sites`` (see the module doc)."""
    g = _Gate(ck, binding)
    for s in sites:
        node, path, titles = s.node, s.path, s.titles
        if isinstance(node, Block):
            g.repetition(node, path, titles)
            continue
        if isinstance(node, StrideMorphism):
            for a in node.dom_:
                g.axis(a, f"axis {a.label}", path, titles)
            for r, row in enumerate(node.rows):
                g.axis(row.axis, f"axis {row.axis.label}", path, titles)
                for k, x in enumerate(row.strides):
                    g.number(x, f"stride {k} of row {r}", f"{path}._cod_stride[{r}]", titles)
                g.number(row.shift, f"the shift of row {r}", f"{path}._cod_stride_shift[{r}]",
                         titles)
            continue
        if isinstance(node, Broadcasted):
            for w in tuple(node.input_weaves) + tuple(node.output_weaves):
                g.array(w, path, titles)
            g.params(node, path, titles)
        for attr in ("dom", "cod"):
            objs = ck.typed(node, attr)
            for obj in objs or ():
                g.array(obj, path, titles)


class _ArrayText:
    """An array's display text (``ir.shapes.array_text``), formatted when a message first
    needs it: most arrays pass every check."""

    __slots__ = ("datatype", "shape", "text")

    def __init__(self, datatype, shape) -> None:
        self.datatype, self.shape = datatype, shape
        self.text: str | None = None

    def __str__(self) -> str:
        if self.text is None:
            self.text = array_text(Array(self.datatype, self.shape))
        return self.text


def _text(expr) -> str:
    try:
        t = sympy.sstr(expr)
    except (ValueError, RecursionError):
        return "(too large to print)"
    return t if len(t) <= 80 else t[:77] + "..."


def _big(n: int) -> str:
    return str(n) if n.bit_length() < 200 else f"about 2**{n.bit_length() - 1}"


__all__ = ["check_sizes"]
