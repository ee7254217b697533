"""A ``Scan`` in generated code: ``base`` inline, then a Python loop over the recurrence axis
(torch has no stable scan) calling the step as a submodule, the states stacked last::

    state = <base>
    history = [state]
    for l in range(N):
        u_l = u[..., l]
        step = self.scan_step(state, u_l)
        state = step
        history.append(state)
    scan = torch.stack(history, dim=-1)
"""
from __future__ import annotations

import sympy

from ncdc.ir.arrays import Array
from ncdc.ir.errors import SpecError
from ncdc.ir.morphisms import Block, Scan
from ncdc.ir.tags import BlockTag

from . import flips
from .names import identifier
from .statements import FOR
from .wires import Wire


def _step_block(scan: Scan) -> Block:
    """The step as a block of its own (one class, called once per step)."""
    title = f"Scan step over {scan.axis.label}"
    tag = BlockTag(-abs(scan.axis.uid) - 1, None, sympy.Integer(1), title)
    return Block(scan.step, tag, path=scan.path + ".step")


def lower_scan(cb, scan: Scan, wires: list[Wire]) -> list[Wire]:
    """The history of ``scan`` on ``wires`` (module docstring)."""
    if any(w.live is not None for w in wires):
        raise SpecError("a Scan over inputs with dead positions is not supported by the code "
                        "generator", scan.path, node_type="Scan")
    n_base = len(scan.base.dom)
    wires = [flips.plain(cb.fw, w) for w in wires]
    (h0,) = cb.lower(scan.base, wires[:n_base])
    h0 = flips.plain(cb.fw, h0)
    if h0.live is not None:
        raise SpecError("a Scan whose first state has dead positions is not supported by the "
                        "code generator", scan.path, node_type="Scan")
    steps = cb.size_code(scan.n)
    state = cb.fw.bind("state", h0.var)
    history = cb.fw.bind("history", f"[{state}]")
    counter = cb.fw.names.fresh(identifier(scan.axis.label, "step") + "_index")
    full = all(w.full for w in wires) and h0.full
    with cb.fw.nested(FOR, f"range({steps})", counter):
        args = [Wire(state, scan.step.dom[0], None, None, full)]
        for k, (w, arr) in enumerate(zip(wires[n_base:], scan.inputs, strict=True)):
            dim = scan.position(k) - len(arr.shape) - 1
            read = f"{w.var}[..., {counter}]" if dim == -1 else f"{w.var}.select({dim}, {counter})"
            var = cb.fw.bind(identifier(arr.shape[-1].label if arr.shape else "input",
                                        "input") + "_at", read)
            args.append(Wire(var, arr, None, None, w.full))
        (nxt,) = cb.call_block(_step_block(scan), args)
        nxt = flips.plain(cb.fw, nxt)
        cb.fw.assign(state, nxt.var)
        cb.fw.call(f"{history}.append({state})")
    (out,) = scan.cod
    var = cb.fw.bind("scan", f"torch.stack({history}, dim=-1)")
    return [Wire(var, Array(out.datatype, out.shape), None, None, full)]
