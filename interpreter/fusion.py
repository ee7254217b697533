"""How the interpreter runs a :class:`~ir.rewrites.BankDiagonal` (a bank ``Linear`` followed by
a diagonal ``View``, grouped by the ``bank_diagonal`` pass of :func:`ir.pipeline.normalize`), so
that expert and group banks stay linear in size.

Evaluated literally the Linear produces an ``|e|^2``-sized intermediate; as one ``einsum`` with
the View's index labels only the diagonal is computed: ``y[e, m] = sum_f x[e, f] W[f, e, m]``.
Values, liveness (the fold over the Linear's input targets) and emulate-mode rounding (to the
Linear's output format, then none for the View) are the same as the literal pair;
``interpret(..., fuse=False)`` leaves the pass out and the tests compare the two.
"""
from __future__ import annotations

import math

import numpy as np

from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.rewrites import BankDiagonal

from .reindex import gather
from .rounding import output_format, round_values
from .values import Value, any_over, land, zero_dead


def applies(m: BankDiagonal, ev) -> bool:
    """Whether ``m`` runs as one contraction under ``ev``: always, except in ``emulate`` mode
    where the Linear's output format is block-scaled (its scales are over the whole output,
    which the contraction never holds; the pair is then evaluated as the composition)."""
    if ev.quant == "emulate":
        dt = output_format(m.linear, 0)
        if dt is not None and getattr(dt, "scale", None) is not None:
            return False
    return True


def _to_out(arr, sub: list, out_labels: list[int]):
    """``arr`` (leading Ellipsis + ``sub`` labels) rearranged to ``out_labels`` (diagonals taken
    for repeated labels), with size-1 dims for labels it lacks."""
    present = [lab for lab in out_labels if lab in sub]
    got = np.einsum(arr, [Ellipsis] + sub, [Ellipsis] + present)
    nlead = got.ndim - len(present)
    shape = list(got.shape[:nlead])
    it = iter(got.shape[nlead:])
    for lab in out_labels:
        shape.append(next(it) if lab in present else 1)
    return got.reshape(shape)


def linear_then_diagonal(ev, lin: Broadcasted, view: Broadcasted, ins, scope, batch, params):
    """Evaluate ``lin ; view`` as one contraction (see the module docstring); ``params`` are
    the Linear occurrence's arrays by role."""
    def compute():
        nb = len(batch)
        deg_v = ev.degree_sizes(view)
        mapping = view.reindexings[0].mapping
        wl = lin.output_weaves[0]
        if len(ins) != len(lin.input_weaves):
            raise ValueError(f"the operator takes {len(lin.input_weaves)} arrays, got {len(ins)}")
        lifted = [gather(v, ev.plan(lin, k), nb) for k, v in enumerate(ins)]
        W = params["weight"]
        deg_labels = [mapping[p] for p in wl.tiled_positions]
        out_labels = list(range(len(deg_v)))
        nxt = len(deg_v)
        operands, w_sub, lives = [], [], []
        for k, v in enumerate(lifted):
            nin = len(lin.input_weaves[k].target)
            in_labels = list(range(nxt, nxt + nin))
            nxt += nin
            operands += [v.values, [Ellipsis] + deg_labels + in_labels]
            w_sub += in_labels
            if v.live is not None:
                folded = any_over(v.live, tuple(range(v.live.ndim - nin, v.live.ndim)))
                folded = folded.reshape(folded.shape[:folded.ndim - nin])
                lives.append(_to_out(folded, deg_labels, out_labels))
        w_sub += [mapping[p] for p in wl.target_positions]
        present = [lab for lab in out_labels if lab in deg_labels or lab in w_sub]
        y, zeroed = None, False
        if len(lifted) == 1:
            y = bank_matmul(lifted[0].values, nb, deg_labels, w_sub[:nxt - len(deg_v)], W,
                            w_sub, present, lives[0] if lives else None, out_labels)
            zeroed = y is not None and bool(lives)
        if y is None:
            y = np.einsum(*operands, W, w_sub, [Ellipsis] + present)
        nlead = y.ndim - len(present)
        shape, it = list(y.shape[:nlead]), iter(y.shape[nlead:])
        shape += [next(it) if lab in present else 1 for lab in out_labels]
        y = y.reshape(shape)
        live = land(*lives)
        if lin.operator.bias:
            b_sub = [mapping[p] for p in wl.target_positions]
            y = y + _to_out(params["bias"], b_sub, out_labels)
            zeroed = False
        if not zeroed:                          # bank_matmul leaves dead rows 0 (never computed)
            y = zero_dead(y, live)
        if ev.quant == "emulate":
            dt = output_format(lin, 0)
            if dt is not None:
                y = zero_dead(round_values(y, dt, y.shape[-1], ev.env), live)
        return [ev.place(view, 0, Value(y, live), batch, deg_v)]

    return ev.guarded(lin, scope, compute)


def bank_matmul(X, nb, deg_labels, in_labels, W, w_sub, present, live, out_labels):
    """``einsum(X[..., *deg, *in], W[w_sub] -> [..., *present])`` for a bank (every degree
    label indexes ``W``'s output, each label once) as one BLAS matmul per bank member, over
    only the rows whose fold is live (``live``: the folded mask in ``out_labels`` order, or
    None; the other rows are 0). Returns None when the labels are not of that form (the
    caller uses ``einsum``)."""
    nd, nin = len(deg_labels), len(in_labels)
    w_out = w_sub[nin:]
    if (not deg_labels or len(set(deg_labels)) != nd or len(set(w_out)) != len(w_out)
            or any(lab not in w_out for lab in deg_labels) or X.ndim != nb + nd + nin
            or set(present) != set(w_out)):
        return None
    free = [lab for lab in w_out if lab not in deg_labels]
    size = dict(zip(w_sub, W.shape, strict=False))
    bank_sizes = tuple(size[lab] for lab in deg_labels)
    in_sizes = tuple(size[lab] for lab in in_labels)
    free_sizes = tuple(size[lab] for lab in free)
    batch = X.shape[:nb]
    Xf = np.broadcast_to(X, batch + bank_sizes + in_sizes)
    n_bank, n_rows, n_in = math.prod(bank_sizes), math.prod(batch), math.prod(in_sizes)
    Xt = np.moveaxis(Xf, list(range(nb, nb + nd)), list(range(nd))).reshape(n_bank, n_rows, n_in)
    perm = [w_sub.index(lab) for lab in (*deg_labels, *in_labels, *free)]
    Wt = np.transpose(W, perm).reshape(n_bank, n_in, math.prod(free_sizes))
    if live is None:
        Y = np.matmul(Xt, Wt)
    else:
        # live is (*batch', *out_labels) with size-1 dims: the rows of each bank member
        tail = live.shape[live.ndim - len(out_labels):]
        pos = [out_labels.index(lab) for lab in deg_labels]
        if sorted(pos) != pos or any(n != 1 for i, n in enumerate(tail) if i not in pos):
            return None
        lv = live.reshape(live.shape[:live.ndim - len(out_labels)] + tuple(tail[p] for p in pos))
        lv = np.broadcast_to(lv, batch + bank_sizes)
        L = np.moveaxis(lv, list(range(nb, nb + nd)), list(range(nd))).reshape(n_bank, n_rows)
        Y = np.zeros((n_bank, n_rows, Wt.shape[-1]), dtype=np.result_type(Xt, Wt))
        for b in range(n_bank):
            rows = np.flatnonzero(L[b])
            if rows.size == n_rows:
                Y[b] = Xt[b] @ Wt[b]
            elif rows.size:
                Y[b, rows] = Xt[b, rows] @ Wt[b]
    Y = Y.reshape(bank_sizes + batch + free_sizes)
    return np.einsum(Y, list(deg_labels) + [Ellipsis] + free, [Ellipsis] + present)
