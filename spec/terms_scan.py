"""Decoder for pyncd's ``Scan`` (``data_structure/TensorDSL.py``): a recurrence over one axis.

Fields: ``step`` and ``base`` (morphisms), ``N`` (the number of steps, a Numeric), ``axis``
(the recurrence axis), ``affine`` (an associative-scan hint for the same recurrence, not
kept), ``n_states`` (1: one state; several: a coupled scan, :class:`~ir.morphisms.CoupledScan`,
whose ``step`` and ``base`` are lists) and ``step_state_deps`` (coupled scans only), ``step_x_l_positions`` (where the recurrence axis
stands in each per-step input; absent or empty: last)."""
from __future__ import annotations

from ncdc.ir.axes import Axis
from ncdc.ir.errors import SpecDecodeError
from ncdc.ir.morphisms import CoupledScan, Scan
from ncdc.ir.numeric import TooLarge, bounded

from .builder import decoder
from .terms_morphisms import morphism_field, morphisms_field
from .terms_numeric import numeric


@decoder("Scan", morphism=True)
def scan(b, obj, path):
    n_states = b.raw(obj, "n_states", path, int, 1)
    axis = b.check(b.field(obj, "axis", path), Axis, obj, "axis", path)
    steps = numeric(b, obj, "N", path)
    try:
        bounded(steps)  # the history axis has N + 1 positions: N must be a number ncdc can add
    except TooLarge as exc:
        raise SpecDecodeError(f"the step count N is too large ({exc})", f"{path}.N",
                              node_type="Scan", field_name="N") from None
    if n_states != 1:
        return _coupled(b, obj, path, n_states, steps, axis)
    if isinstance(obj.get("step"), list) or isinstance(obj.get("base"), list):
        raise SpecDecodeError("step and base of a Scan with one state are single morphisms, "
                              "not lists", path, node_type="Scan")
    positions = b.raw(obj, "step_x_l_positions", path, list, [])
    if not all(isinstance(p, int) and not isinstance(p, bool) for p in positions):
        raise SpecDecodeError("step_x_l_positions must be a list of axis positions",
                              f"{path}.step_x_l_positions", node_type="Scan",
                              field_name="step_x_l_positions")
    return Scan(morphism_field(b, obj, "step", path), morphism_field(b, obj, "base", path),
                steps, axis, tuple(positions), path=path)


def _coupled(b, obj, path, n_states, steps, axis) -> CoupledScan:
    """``n_states`` states stepped together: ``step`` and ``base`` are lists of that length;
    ``step_state_deps`` (empty: every state, in order) the states each step reads."""
    if n_states < 2:
        raise SpecDecodeError(f"n_states must be at least 1, not {n_states}", f"{path}.n_states",
                              node_type="Scan", field_name="n_states")
    parts = {name: morphisms_field(b, obj, name, path) for name in ("step", "base")}
    for name, ms in parts.items():
        if len(ms) != n_states:
            raise SpecDecodeError(f"a Scan of {n_states} states has {len(ms)} {name} "
                                  "morphism(s)", f"{path}.{name}", node_type="Scan",
                                  field_name=name)
    deps = b.raw(obj, "step_state_deps", path, list, [])
    if not deps:
        deps = [list(range(n_states))] * n_states
    if len(deps) != n_states or not all(
            isinstance(d, list) and all(isinstance(j, int) and not isinstance(j, bool)
                                        and 0 <= j < n_states for j in d) for d in deps):
        raise SpecDecodeError(f"step_state_deps must hold, per state, indices below {n_states}",
                              f"{path}.step_state_deps", node_type="Scan",
                              field_name="step_state_deps")
    return CoupledScan(parts["step"], parts["base"], tuple(tuple(d) for d in deps), steps,
                       axis, path=path)
