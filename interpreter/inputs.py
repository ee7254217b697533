"""What an evaluation needs from outside: its domain arrays and the tape slots it reads before
writing them; seeded random stand-ins for both (the CLI's default inputs)."""
from __future__ import annotations

import numpy as np

from ncdc.ir.arrays import Array
from ncdc.ir.datatypes import kind
from ncdc.ir.env import Env
from ncdc.ir.errors import EvaluationError
from ncdc.ir.morphisms import Broadcasted, Drop, Grab, ParaWrap
from ncdc.ir.operators import ParaBlockOperator
from ncdc.ir.traverse import Descend, Visitor, traverse
from ncdc.ir.walk import arity

from .fixed import natural_bound
from .values import Value, check_allocation, dtype_of

INT64_MAX = 2**63 - 1


class _TapeNeeds(Visitor):
    """Wire values are placeholders (``None``); records the tape slots read before written,
    each block body once (a second iteration finds what the first wrote)."""

    def __init__(self):
        self.written: set[int] = set()
        self.needs: dict[int, tuple[object, Array]] = {}

    def operator(self, node, ins, scope):
        return [None] * len(node.output_weaves)

    def box(self, node, ins, scope):
        op = node.operator
        ports = isinstance(op, ParaBlockOperator)
        if ports:                                 # the box writes its grab ports first
            self.written.update(g.tape.uid for g in op.grabs)

        def then(_results):
            if ports:                             # ... and its block writes its drop ports
                self.written.update(d.tape.uid for d in op.drops)
            return [None] * len(node.output_weaves)
        return Descend(((".operator.block", op.block),), ins, then=then)

    def rearrange(self, node, ins, scope):
        return [None] * len(node.mapping)

    def repetitions(self, block, scope) -> int:
        return 1

    def grab(self, slot, array, scope):
        if slot.uid not in self.written and slot.uid not in self.needs:
            self.needs[slot.uid] = (slot, array)

    def drop(self, slot, value, array, scope) -> None:
        self.written.add(slot.uid)

    def truncated(self, node, ins, scope):
        return Descend(node.children(), ins, then=lambda _: [])

    def stride(self, node, ins, scope):
        return []

    def unknown(self, node, ins, scope):
        return []


def tape_needs(root) -> list[tuple[object, Array]]:
    """(slot, array type) of each tape slot ``root`` reads before it writes it, in order."""
    order = _TapeNeeds()
    traverse(root, [None] * arity(root), order)
    return list(order.needs.values())


def tape_slots(root) -> dict[int, object]:
    """Every tape slot ``root`` reads or writes: uid -> TapeSlot."""
    found: dict[int, object] = {}
    stack = [root]
    while stack:
        m = stack.pop()
        if isinstance(m, ParaWrap):
            found.update((s.uid, s) for s in (*m.grabs, *m.drops) if s is not None)
        elif isinstance(m, (Grab, Drop)):
            found[m.tape.uid] = m.tape
        elif isinstance(m, Broadcasted) and isinstance(m.operator, ParaBlockOperator):
            found.update((p.tape.uid, p.tape) for p in (*m.operator.grabs, *m.operator.drops))
        stack.extend(c for _, c in m.children())
    return found


def random_array(arr: Array, env: Env, rng: np.random.Generator) -> np.ndarray:
    """Standard-normal reals (and complex parts); naturals uniform below their bound."""
    shape = env.sizes(arr.shape)
    k = kind(arr.datatype)
    check_allocation(shape, f"a random input {arr}", 16 if k == "complex" else 8)
    if k == "natural":
        bound = min(natural_bound(arr.datatype, env), INT64_MAX)
        if bound < 1:
            raise EvaluationError(f"no natural lies below the bound of {arr.datatype}")
        return rng.integers(0, bound, size=shape, dtype=np.int64)
    if k == "complex":
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return rng.standard_normal(shape)


def random_inputs(morphism, env: Env, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [random_array(a, env, rng) for a in morphism.dom]


def random_tape(morphism, env: Env, seed: int = 0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng([seed, 1])
    return {slot.uid: random_array(arr, env, rng) for slot, arr in tape_needs(morphism)}


def coerce(x, arr: Array, env: Env, what: str, lead: bool = False) -> Value:
    """A user-given array (or ``(values, live)`` pair) checked against its array type; with
    ``lead``, any leading (batch) dims are accepted before the type's shape."""
    live = None
    if isinstance(x, Value) or (isinstance(x, tuple) and len(x) == 2 and (
            x[1] is None or np.asarray(x[1]).dtype == np.bool_)):
        x, live = x
    a = np.asarray(x)
    shape = env.sizes(arr.shape)
    if lead and a.ndim > len(shape):
        shape = a.shape[:a.ndim - len(shape)] + shape
    if a.shape != shape:
        labels = ", ".join(f"{ax.label}={n}" for ax, n in
                           zip(arr.shape, shape[len(shape) - len(arr.shape):], strict=False))
        raise EvaluationError(f"{what} has shape {a.shape}; expected {shape} [{labels}] "
                              f"({arr})")
    want = dtype_of(arr.datatype)
    if want is np.int64:
        integral = np.issubdtype(a.dtype, np.integer) or (
            np.issubdtype(a.dtype, np.floating) and bool(np.all(np.rint(a) == a)))
        if not integral:
            raise EvaluationError(f"{what} must hold naturals ({arr.datatype}), got "
                                  f"dtype {a.dtype}")
        a = a.astype(np.int64)
    elif np.iscomplexobj(a) and want is not np.complex128:
        raise EvaluationError(f"{what} must be real ({arr.datatype}), got complex values")
    elif not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        raise EvaluationError(f"{what} has non-numeric dtype {a.dtype}")
    else:
        a = a.astype(want, copy=False)
    if live is not None:
        live = np.asarray(live)
        if live.shape != shape or live.dtype != np.bool_:
            raise EvaluationError(f"{what}: the liveness mask must be a bool array of shape "
                                  f"{shape}")
        a = np.where(live, a, np.zeros((), a.dtype))
        if live.all():
            live = None
    if want is np.int64 and a.size:
        check = a if live is None else a[live]
        bound = natural_bound(arr.datatype, env)
        if check.size and (check.min() < 0 or (bound <= INT64_MAX and check.max() >= bound)):
            bad = check[(check < 0) | (check >= min(bound, INT64_MAX))]
            raise EvaluationError(f"{what} holds {int(bad.flat[0])}, outside its type "
                                  f"{arr.datatype} (naturals below {bound})")
    return Value(a, live)
