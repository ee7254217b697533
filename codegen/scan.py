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
from ncdc.ir.morphisms import Block, CoupledScan, Scan
from ncdc.ir.tags import BlockTag

from . import flips
from .names import identifier
from .statements import FOR
from .wires import Wire


def _step_block(scan, step, k: int | None = None) -> Block:
    """A step as a block of its own (one class, called once per step)."""
    which = "" if k is None else f" {k}"
    title = f"Scan step{which} over {scan.axis.label}"
    tag = BlockTag(-abs(scan.axis.uid) - 2 - (k or 0), None, sympy.Integer(1), title)
    return Block(step, tag, path=scan.path + (".step" if k is None else f".step[{k}]"))


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
        (nxt,) = cb.call_block(_step_block(scan, scan.step), args)
        nxt = flips.plain(cb.fw, nxt)
        cb.fw.assign(state, nxt.var)
        cb.fw.call(f"{history}.append({state})")
    (out,) = scan.cod
    var = cb.fw.bind("scan", f"torch.stack({history}, dim=-1)")
    return [Wire(var, Array(out.datatype, out.shape), None, None, full)]


def lower_coupled_scan(cb, scan: CoupledScan, wires: list[Wire]) -> list[Wire]:
    """The histories of a coupled scan: every base inline, then one loop in which every step
    reads the states of the round before (Jacobi), then the states are replaced."""
    if any(w.live is not None for w in wires):
        raise SpecError("a Scan over inputs with dead positions is not supported by the code "
                        "generator", scan.path, node_type="Scan")
    wires = [flips.plain(cb.fw, w) for w in wires]
    at, states, histories = 0, [], []
    for k, base in enumerate(scan.bases):
        n = len(base.dom)
        (h0,) = cb.lower(base, wires[at:at + n])
        h0 = flips.plain(cb.fw, h0)
        if h0.live is not None:
            raise SpecError("a Scan whose first state has dead positions is not supported by "
                            "the code generator", scan.path, node_type="Scan")
        at += n
        states.append(cb.fw.bind(f"state_{k}", h0.var))
        histories.append(cb.fw.bind(f"history_{k}", f"[{states[-1]}]"))
    own = []
    for ins in scan.inputs:
        own.append(wires[at:at + len(ins)])
        at += len(ins)
    full = all(w.full for w in wires)
    counter = cb.fw.names.fresh(identifier(scan.axis.label, "step") + "_index")
    with cb.fw.nested(FOR, f"range({cb.size_code(scan.n)})", counter):
        news = []
        for k, (step, deps) in enumerate(zip(scan.steps, scan.deps, strict=True)):
            args = [Wire(states[j], step.dom[m], None, None, full) for m, j in enumerate(deps)]
            for w, arr in zip(own[k], scan.inputs[k], strict=True):
                var = cb.fw.bind(identifier(arr.shape[-1].label if arr.shape else "input",
                                            "input") + "_at", f"{w.var}[..., {counter}]")
                args.append(Wire(var, arr, None, None, w.full))
            (nxt,) = cb.call_block(_step_block(scan, step, k), args)
            news.append(flips.plain(cb.fw, nxt).var)
        for k, var in enumerate(news):
            cb.fw.assign(states[k], var)
            cb.fw.call(f"{histories[k]}.append({states[k]})")
    out = []
    for k, arr in enumerate(scan.cod):
        var = cb.fw.bind(f"scan_{k}", f"torch.stack({histories[k]}, dim=-1)")
        out.append(Wire(var, Array(arr.datatype, arr.shape), None, None, full))
    return out
