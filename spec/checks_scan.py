"""Checks of a ``Scan`` (docs/format.md §11.27): the state its base gives is the state its step
takes and gives back, and the step count is the recurrence axis's length.

Like every site check it takes the :class:`~spec.validate.Checker` and one site; a typing
failure it meets (``SpecTypeError``) is the checker's ``type-error``."""
from __future__ import annotations

import sympy

from ncdc.ir.morphisms import Scan
from ncdc.ir.shapes import compare_objects, objects_text


def check_scan(ck, node: Scan, path: str, titles) -> None:
    """``base.cod == (step.dom[0],)`` and ``step.cod == (step.dom[0],)`` (``scan-state``);
    a literal ``N`` other than a literal ``|axis|`` is ``scan-steps``; positions of the
    recurrence axis that do not fit the per-step inputs, a ``type-error``."""
    sdom, scod, bcod = ck.typed(node.step, "dom"), ck.typed(node.step, "cod"), \
        ck.typed(node.base, "cod")
    if sdom and scod is not None and bcod is not None:
        state = (sdom[0],)
        for what, gives, where in (("its base gives", bcod, ".base"),
                                   ("its step gives", scod, ".step")):
            for prob in compare_objects(gives, state):
                if prob.is_error:
                    ck.error("scan-state", f"Scan over {node.axis.label}: {what} "
                             f"{objects_text(gives)} but its step takes the state "
                             f"{objects_text(state)}", path + where, titles,
                             prob.axes_involved())
                    break
    n, size = node.n, node.axis.size
    if isinstance(n, sympy.Integer) and isinstance(size, sympy.Integer) and n != size:
        ck.error("scan-steps", f"Scan over {node.axis.label} runs {n} steps but the axis has "
                 f"{size} positions", path, titles)
    tuple(node.dom)  # step_x_l_positions that do not fit raise: the checker's type-error


__all__ = ["check_scan"]
