"""The lowering context a codegen rule sees (:class:`Ctx`): the ``Broadcasted`` being lowered,
its operands, and the few services of the class being written that a rule may use (sizes,
members, locals, block calls, the tape)."""
from __future__ import annotations

import numpy as np

from ncdc.ir.axes import AffineSparseAxis
from ncdc.ir.morphisms import Broadcasted

from . import dtypes, liveness
from .emit import align_code, atom, einsum_letters
from .matmul import matmul_code
from .names import comment_text, identifier
from .operands import Operand
from .wires import Wire


class Ctx:
    """What a rule sees: the Broadcasted, its operands and code-emission helpers."""

    def __init__(self, cb, b: Broadcasted, operands: list[Operand], relabel: dict | None = None,
                 final: Broadcasted | None = None):
        self.cb = cb
        self.gen = cb.gen
        self.fw = cb.fw
        self.b = b
        self.op = b.operator
        self.ops = operands
        self.deg_labels = [("d", i) for i in range(len(b.degree))]
        self.group_axes: dict = {}
        self.relabel = relabel or {}
        self.final = final
        self.wires: list[Wire] = []
        # pairs form (codegen/pairs.py): the selection, where its arrays come from, and the
        # labels of its sparse axis (all read as the one pairs dim ``("p",)``)
        self.pairs = None
        self.pairs_origins: frozenset = frozenset()
        self.pairs_axis = None
        self.s_labels: frozenset = frozenset()

    # -- services of the class being written (codegen/lower.py) -----------------------------
    def lead(self) -> str | None:
        """The local holding the leading (batch) shape, or None in a nullary class."""
        return self.cb.lead()

    def size_code(self, expr) -> str:
        """Code for a size expression in ``forward``."""
        return self.cb.sizes.fwd(expr)

    def init_size(self, expr) -> str:
        """Code for a size expression in ``__init__`` (the constructor's arguments)."""
        return self.cb.sizes.init(expr)

    def axis_size(self, axis) -> str:
        return self.cb.sizes.axis(axis)

    def symbol(self, sym) -> str:
        """Code for a size symbol in ``forward`` (``self.<name>`` or a data-fixed local)."""
        return self.cb.sizes.fwd_symbol(sym)

    def init_symbol(self, sym) -> str:
        return self.cb.sizes.init_symbol(sym)

    def param(self, base: str, role: str, shape: list[str], init: str, learned: bool = True,
              dtype: str | None = None) -> str:
        """A parameter or buffer of this operator (see :meth:`codegen.members.Members.add_param`);
        returns the code reading it. A learned array no gradient reaches
        (:mod:`codegen.gradients`) is a persistent buffer, unless held in a storage format."""
        if learned and self.gen.key_of(self.b) in self.gen.no_gradient \
                and self.cb.members.formats(self.b, role) is None:
            learned = False
        return self.cb.members.add_param(base, self.b, role, shape, init, learned, dtype)

    def table(self, base: str, shape: list[str], value: str) -> str:
        """A non-persistent buffer computed by ``reset_parameters``."""
        return self.cb.members.add_table(base, shape, value)

    def use(self, prelude: str) -> None:
        """Paste the named prelude (``codegen/prelude/<name>.py``) into the file."""
        self.gen.prelude.add(prelude)

    # -- the forward's dtype and device (codegen/dtypes.py, PRECISION.md) ----------------------
    def real_dtype(self) -> str:
        """Code for the forward's real dtype (its first real input's, else torch's default)."""
        return dtypes.real_dtype(self.cb.iface.inputs)

    def wide_real(self) -> str:
        """Code for float32 at least (float64 stays float64)."""
        return dtypes.wide_real(self.cb.iface.inputs)

    def complex_dtype(self) -> str:
        """Code for complex64 at least (complex128 in a float64 forward)."""
        return dtypes.complex_dtype(self.cb.iface.inputs)

    def device(self) -> str | None:
        """Code for the forward's device, or None in a nullary forward."""
        return dtypes.device(self.cb.iface.inputs)

    def unit(self) -> str:
        """A float scalar 1 buffer of the class (follows the module's dtype and device)."""
        return self.cb.members.unit()

    def run_block(self, block, wires: list[Wire], lifted: tuple = ()) -> list[Wire]:
        """The outputs of ``block`` on ``wires``: inlined when drawn in place and not lifted over
        a degree, else a submodule call."""
        if not lifted and self.cb.inline_block(block):
            return self.cb.lower_block(block, wires)
        return self.cb.call_block(block, wires, lifted=lifted)

    def tape_write(self, slot, wire: Wire) -> None:
        self.cb.tape_write(slot, wire)

    def tape_read(self, slot, array, bind: bool = True) -> Wire:
        return self.cb.tape_read(slot, array, bind)

    # -- labels ------------------------------------------------------------------------------
    def axis(self, lab):
        tag = lab[0]
        if tag == "d":
            return self.b.degree[lab[1]]
        if tag == "t":
            return self.b.input_weaves[lab[1]].target[lab[2]]
        if tag == "o":
            return self.b.output_weaves[lab[1]].target[lab[2]]
        if tag == "v":
            return self.final.degree[lab[1]]
        if tag == "g":
            return self.group_axes[lab]
        if tag == "p":
            return self.pairs_axis
        raise AssertionError(lab)

    def pl(self, lab):
        """``lab``, or the pairs dim when it stands for the selection's sparse axis."""
        return ("p",) if lab in self.s_labels else lab

    def size(self, lab) -> str:
        return self.axis_size(self.axis(lab))

    def ref(self, lab) -> int:
        return self.gen.ref_size(self.axis(lab).size)

    def spanned(self) -> list:
        """Degree labels some operand carries, in degree order."""
        have = {lab for o in self.ops for lab in o.labels}
        return [lab for lab in self.deg_labels if lab in have]

    def any_full(self) -> bool:
        return any(o.full for o in self.ops)

    @property
    def label_name(self) -> str:
        return identifier(self.op.label, "value") if self.op.label else ""

    def name(self, base: str) -> str:
        return base

    # -- alignment -----------------------------------------------------------------------------
    def aligned(self, k: int, dst: list, expand: bool = False) -> str:
        """Operand ``k`` with its trailing dims in the order ``dst`` (missing -> size 1, or
        expanded to full size with ``expand``)."""
        o = self.ops[k]
        code = align_code(o.expr, o.labels, dst)
        if expand:
            code = self.expand(code, dst, present=set(o.labels), full=o.full)
        return code

    def expand(self, code: str, dst: list, present: set, full: bool) -> str:
        missing = [lab for lab in dst if lab not in present]
        lead = self.lead()
        if not missing and (full or lead is None):
            return code
        sizes = [self.size(lab) if lab not in present else "-1" for lab in dst]
        prefix = ["*lead"] if lead is not None else []
        return atom(code) + f".expand({', '.join(prefix + sizes)})"

    def aligned_live(self, k: int, dst: list) -> str | None:
        o = self.ops[k]
        if o.live is None:
            return None
        return align_code(o.live, o.labels, dst)

    def static_of(self, k: int, dst: list) -> tuple[np.ndarray, np.ndarray]:
        o = self.ops[k]
        if o.static is None:
            return liveness.full(len(dst)), liveness.full(len(dst))
        return (liveness.align(o.static[0], o.labels, dst),
                liveness.align(o.static[1], o.labels, dst))

    def shape_comment(self, labels: list) -> str:
        return "[" + ", ".join(comment_text(self.axis(lab).label, 20) for lab in labels) + "]"

    def bind(self, base: str, expr: str, labels: list | None = None, note: str = "") -> str:
        comment = self.shape_comment(labels) if labels is not None else ""
        if note:
            comment = f"{comment} {note}".strip()
        return self.fw.bind(base, expr, comment or None)

    # -- liveness helpers ------------------------------------------------------------------------
    def masked(self) -> list[int]:
        return [k for k, o in enumerate(self.ops) if o.live is not None]

    def product_live(self, dst: list, ks: list[int] | None = None):
        """Dead iff any operand is dead (pointwise products): (code, static) aligned to dst."""
        ks = self.masked() if ks is None else [k for k in ks if self.ops[k].live is not None]
        if not ks:
            return None, None
        pos = liveness.full(len(dst))
        sure = liveness.full(len(dst))
        for k in ks:
            p, s = self.static_of(k, dst)
            pos, sure = pos & p, sure & s
        if liveness.make(pos, sure) is None:
            return None, None
        code = " & ".join(self.aligned_live(k, dst) for k in ks)
        return code, (pos, sure)

    def fold_static(self, static, labels: list, folded: list, keep: list):
        """Fold liveness over ``folded`` labels: live iff some folded term is live."""
        if static is None:
            return None
        axes = tuple(labels.index(lab) for lab in folded)
        pos = static[0].any(axis=axes, keepdims=True) if axes else static[0]
        sure = static[1].any(axis=axes, keepdims=True) if axes else static[1]
        rest = [lab for lab in labels if lab not in folded]
        pos = pos.reshape([n for i, n in enumerate(pos.shape) if i not in axes])
        sure = sure.reshape([n for i, n in enumerate(sure.shape) if i not in axes])
        return (liveness.align(pos, rest, keep), liveness.align(sure, rest, keep))

    def where_live(self, live: str, value: str, fill: str = "0") -> str:
        return f"torch.where({live}, {value}, {fill})"

    # -- einsum --------------------------------------------------------------------------------
    def einsum(self, terms: list[tuple], out: list) -> str:
        """``torch.einsum`` code over labelled terms ``(code, labels[, batched])``; leading
        (batch) dims of batched terms broadcast via ``...``; one batched matrix product is
        ``torch.matmul`` (:mod:`codegen.matmul`), unless it reads a window as a band."""
        band = self._band(terms, out)
        product = matmul_code(terms, out, self.use) if band is None else None
        if product is not None:
            return product
        order = [lab for t in terms for lab in t[1]] + list(out)
        letters = einsum_letters(order, lambda lab: self.axis(lab).label)
        ins = ",".join(("..." if (len(t) < 3 or t[2]) else "")
                       + "".join(letters[lab] for lab in t[1]) for t in terms)
        batched = any(len(t) < 3 or t[2] for t in terms)
        spec = f"{ins}->{'...' if batched else ''}{''.join(letters[lab] for lab in out)}"
        if band is not None:  # prelude views.band_einsum: a window read as blocks in 16 bits
            return (f"band_einsum({spec!r}, {terms[0][0]}, {terms[1][0]}, "
                    f"{letters[band[0]]!r}, {letters[band[1]]!r})")
        return f"torch.einsum({spec!r}, {', '.join(t[0] for t in terms)})"

    def _band(self, terms: list[tuple], out: list):
        """``(x, w)`` labels where the second of two terms holds a window axis ``w`` guided by
        ``x`` (an affine sparse axis, ``w|x``), ``x`` also in the first term and the result, and
        ``w`` in the result or the first term but not both; else None."""
        if len(terms) != 2:
            return None
        (_, la, *_), (_, lb, *_) = terms
        for lw in lb:
            axis = self.axis(lw)
            guides = axis.guides if isinstance(axis, AffineSparseAxis) else ()
            for lx in lb:
                if lx != lw and self.axis(lx) in guides and lx in la and lx in out \
                        and (lw in out) != (lw in la):
                    return lx, lw
        return None

    def rel(self, lab):
        return self.relabel.get(lab, lab)
