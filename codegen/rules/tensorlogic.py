"""``TensorEquation`` (pyncd TensorLogic): one ``torch.einsum`` over the inputs (a ``Bool`` mask
as its truth values, nonzero = 1) and the computed Iverson predicates (each built from
``torch.arange`` index vectors of its axes), then the nested nonlinearity if any."""
from __future__ import annotations

from ncdc.ir.axes import Axis
from ncdc.ir.errors import SpecError
from ncdc.ir.operators import Elementwise, Identity
from ncdc.ir.operators.tensorlogic import (
    COMPARISONS,
    IversonBinOp,
    IversonUnaryOp,
    TensorEquation,
    TensorRef,
    constant_value,
    distinct,
    iverson_axes,
)
from ncdc.ir.operators.tensorlogic import is_bool as holds_truth_values

from ..emit import atom
from ..names import identifier
from ..operands import OpResult
from ..products import contract, fold_live
from ..registry import rule
from .elementwise import ELEMENTWISE


def _label_of(ctx, axis: Axis):
    """The degree label of a retained axis, else the group label of a summed one."""
    for i, a in enumerate(ctx.b.degree):
        if a == axis:
            return ("d", i)
    g = ("g", axis.uid)
    ctx.group_axes.setdefault(g, axis)
    return g


class _Printer:
    """Torch code of a predicate: ``(code, is_bool)`` per node; ``index`` maps each axis to the
    code of its index vector shaped to broadcast."""

    def __init__(self, index: dict):
        self.index = index

    def __call__(self, expr) -> tuple[str, bool]:
        if isinstance(expr, Axis):
            return self.index[expr], False
        if not iverson_axes(expr):  # constants fold: every code below is then a tensor
            return str(constant_value(expr)), False
        if isinstance(expr, IversonUnaryOp):
            code, is_bool = self(expr.operand)
            if expr.op == "~":
                return (f"~{atom(code)}", True) if is_bool else (f"(1 - {code})", False)
            code = self._number(code, is_bool)
            return (f"{atom(code)}.abs()" if expr.op == "abs" else f"(-{atom(code)})"), False
        assert isinstance(expr, IversonBinOp)
        (lc, lb), (rc, rb) = self(expr.lhs), self(expr.rhs)
        if expr.op in ("&", "|"):
            lc, rc = (lc if lb else f"({lc} != 0)"), (rc if rb else f"({rc} != 0)")
            return f"({lc} {expr.op} {rc})", True
        lc, rc = self._number(lc, lb), self._number(rc, rb)
        return f"({lc} {expr.op} {rc})", expr.op in COMPARISONS

    @staticmethod
    def _number(code: str, is_bool: bool) -> str:
        return f"{atom(code)}.long()" if is_bool else code


def _predicate(ctx, f, dtype: str, device: str) -> tuple[str, list]:
    axes = distinct(iverson_axes(f))
    if not axes:  # a constant factor
        value = float(constant_value(f))
        return ctx.bind("predicate", f"torch.tensor({value!r}, dtype={dtype}{device})"), []
    labels = [_label_of(ctx, a) for a in axes]
    index = {}
    for i, (a, lab) in enumerate(zip(axes, labels, strict=False)):
        var = ctx.bind(identifier(a.label, "axis") + "_index",
                       f"torch.arange({ctx.size(lab)}{device})")
        if len(axes) > 1:
            var = f"{var}[{', '.join(':' if j == i else 'None' for j in range(len(axes)))}]"
        index[a] = var
    code, _ = _Printer(index)(f)
    mask = ctx.bind("predicate", f"{atom(code)}.to({dtype})", labels, note="Iverson bracket")
    return mask, labels


@rule(TensorEquation)
def tensor_equation(ctx):
    eq: TensorEquation = ctx.op
    factors = eq.operands
    if len(ctx.ops) != len(factors):
        raise SpecError(f"the equation reads {len(factors)} arrays (its TensorRefs and Bool "
                        f"masks) but the box has {len(ctx.ops)} inputs", ctx.b.path)
    relabelled = []
    for k, o in enumerate(ctx.ops):
        tgt = ctx.b.input_weaves[k].target
        relabelled.append([_label_of(ctx, tgt[lab[2]]) if lab[0] == "t" else lab
                           for lab in o.labels])
    arrays = [o.expr for f, o in zip(factors, ctx.ops, strict=True) if isinstance(f, TensorRef)]
    dtype = f"{arrays[0]}.dtype" if arrays else "torch.get_default_dtype()"
    device = f", device={ctx.ops[0].expr}.device" if ctx.ops else ""
    exprs = [o.expr if isinstance(f, TensorRef) else
             ctx.bind("mask", f"({o.expr} != 0).to({dtype})", relabelled[k],
                      note="Bool mask of an Iverson factor")
             for k, (f, o) in enumerate(zip(factors, ctx.ops, strict=True))]
    terms = [(k, exprs[k], relabelled[k]) for k in range(len(ctx.ops))]
    for f in eq.predicates:
        mask, labels = _predicate(ctx, f, dtype, device)
        terms.append((None, mask, labels))
    groups = list(dict.fromkeys(lab for _, _, labs in terms for lab in labs if lab[0] == "g"))
    code, outl = contract(ctx, terms, set(groups), "contraction")
    name = identifier(eq.lhs_name.text, "equation") if eq.lhs_name is not None else "equation"
    var = ctx.bind(name, code, outl)
    if holds_truth_values(ctx.b.output_weaves[0].datatype):  # pyncd's demotion of Bool
        var = ctx.bind(name + "_holds", f"({var} > 0).to({var}.dtype)", outl)
    live, static = fold_live(ctx, relabelled, groups, outl)
    if live is not None:
        live = ctx.bind(var + "_live", live)
    inner = eq.operator
    if inner is not None and not isinstance(inner, Identity):
        template = ELEMENTWISE.get(inner.function) if isinstance(inner, Elementwise) else None
        if template is None and not (isinstance(inner, Elementwise)
                                     and inner.function == "identity"):
            raise SpecError(f"a {inner.kind} nonlinearity inside a TensorEquation is not "
                            "supported (pyncd splits it into its own box)", ctx.b.path)
        if template is not None:
            var = ctx.bind(inner.function, template.format(x=var), outl)
            if live is not None:
                var = ctx.bind(var, ctx.where_live(live, var), outl)
    return [OpResult(var, outl, live, static)]
