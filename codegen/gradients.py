"""Which parameters a gradient can reach: a parameter whose value meets the outputs only through
operators of zero derivative (a comparison such as ``IsPositive``, a rounding such as
``Ceiling``) or only through the liveness a selection makes (the positions top-k keeps) never
receives one. Such an array, the expert gate's correction bias that only moves the top-k choice,
is generated as a persistent buffer: it loads and saves as before, but no optimiser or DDP sees
an unused parameter.

The analysis follows the wires (:func:`ir.traverse.traverse`): each wire carries the set of
parameter sites its value depends on differentiably (a bit mask), every operator passes the
union of its inputs' on, adding its own site, and an elementwise formula that is piecewise
constant in its operand passes nothing. Values written to the tape count as reaching."""
from __future__ import annotations

import sympy

from ncdc.ir.errors import SpecError
from ncdc.ir.numeric import FREE_INPUT, Ceiling, IsPositive
from ncdc.ir.operators import Arithmetic
from ncdc.ir.traverse import Visitor, traverse
from ncdc.ir.walk import arity

FLAT = (IsPositive, Ceiling, sympy.floor, sympy.ceiling, sympy.sign, sympy.Heaviside)
"""Functions of zero derivative wherever it exists."""


def piecewise_constant(formula) -> bool:
    """Whether ``formula`` reads its operand only inside :data:`FLAT` functions."""
    expr = sympy.sympify(formula)
    flat = expr.replace(lambda e: isinstance(e, FLAT), lambda e: sympy.Dummy("c"))
    return FREE_INPUT not in flat.free_symbols


class _Reach(Visitor):
    def __init__(self, bits: dict[int, int]):
        self.bits = bits  # id(site) -> its bit
        self.tape: dict[int, int] = {}
        self.escaped = 0

    def operator(self, node, ins, scope):
        n = len(node.output_weaves)
        if isinstance(node.operator, Arithmetic) and piecewise_constant(node.operator.formula):
            return [0] * n
        value = self.bits.get(id(node), 0)
        for v in ins:
            value |= v
        return [value] * n

    def grab(self, slot, array, scope):
        return self.tape.get(slot.uid, 0)

    def drop(self, slot, value, array, scope):
        self.tape[slot.uid] = self.tape.get(slot.uid, 0) | value
        self.escaped |= value

    def repetitions(self, block, scope):
        rep = block.tag.repetition
        return min(int(rep), 3) if isinstance(rep, (int, sympy.Integer)) else 3


def unreached_sites(root, sites) -> set[int]:
    """``id`` of each of ``sites`` (parameter-holding ``Broadcasted`` nodes of ``root``) that no
    gradient from ``root``'s outputs (or from what it writes to the tape) reaches; empty when
    the analysis cannot follow ``root`` (then every parameter stays one)."""
    bits = {id(s): 1 << k for k, s in enumerate(dict.fromkeys(sites))}
    if not bits:
        return set()
    visitor = _Reach(bits)
    try:
        outs = traverse(root, [0] * arity(root), visitor)
    except SpecError:
        return set()
    reached = visitor.escaped
    for v in outs:
        reached |= v
    return {k for k, bit in bits.items() if not reached & bit}
