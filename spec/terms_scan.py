"""Decoder for pyncd's ``Scan`` (``data_structure/TensorDSL.py``): a recurrence over one axis.

Fields: ``step`` and ``base`` (morphisms), ``N`` (the number of steps, a Numeric), ``axis``
(the recurrence axis), ``affine`` (an associative-scan hint for the same recurrence, not
kept), ``n_states`` (1: one state; a coupled scan, several, is refused by name) and
``step_state_deps`` (coupled scans only), ``step_x_l_positions`` (where the recurrence axis
stands in each per-step input; absent or empty: last)."""
from __future__ import annotations

from ncdc.ir.axes import Axis
from ncdc.ir.errors import SpecDecodeError
from ncdc.ir.morphisms import Scan

from .builder import decoder
from .terms_morphisms import morphism_field
from .terms_numeric import numeric


@decoder("Scan", morphism=True)
def scan(b, obj, path):
    n_states = b.raw(obj, "n_states", path, int, 1)
    if n_states != 1:
        raise SpecDecodeError(f"a coupled Scan ({n_states} states updated together) is not "
                              "supported; ncdc reads scans with one state", f"{path}.n_states",
                              node_type="Scan", field_name="n_states")
    if isinstance(obj.get("step"), list) or isinstance(obj.get("base"), list):
        raise SpecDecodeError("step and base of a Scan with one state are single morphisms, "
                              "not lists", path, node_type="Scan")
    axis = b.check(b.field(obj, "axis", path), Axis, obj, "axis", path)
    positions = b.raw(obj, "step_x_l_positions", path, list, [])
    if not all(isinstance(p, int) and not isinstance(p, bool) for p in positions):
        raise SpecDecodeError("step_x_l_positions must be a list of axis positions",
                              f"{path}.step_x_l_positions", node_type="Scan",
                              field_name="step_x_l_positions")
    return Scan(morphism_field(b, obj, "step", path), morphism_field(b, obj, "base", path),
                numeric(b, obj, "N", path), axis, tuple(positions), path=path)
