"""Checks of a ``Scan`` (docs/format.md §11.27): the state its base gives is the state its step
takes and gives back, and the step count is the recurrence axis's length.

Like every site check it takes the :class:`~spec.validate.Checker` and one site; a typing
failure it meets (``SpecTypeError``) is the checker's ``type-error``."""
from __future__ import annotations

import sympy

from ncdc.ir.arrays import Array
from ncdc.ir.morphisms import CoupledScan, Scan
from ncdc.ir.shapes import compare_objects, objects_text


def _renamed(prob) -> bool:
    """A state whose axes differ from the one taken only by uid: the same datatype and, axis
    by axis, the same size expression (pyncd writes a matrix recurrence's result on a renamed
    axis). Sizes are compared as written, never simplified: a hostile size such as
    ``2**(2**62)`` would make simplification run without bound."""
    a, b = prob.left, prob.right
    return (prob.kind == "axes" and isinstance(a, Array) and isinstance(b, Array)
            and a.datatype == b.datatype and len(a.shape) == len(b.shape)
            and all(x.size == y.size for x, y in zip(a.shape, b.shape, strict=True)))


def check_scan(ck, node: Scan, path: str, titles) -> None:
    """``base.cod == (step.dom[0],)`` and ``step.cod == (step.dom[0],)`` (``scan-state``: a
    warning where only the axes' uids differ, sizes and datatype agreeing);
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
                    text = (f"Scan over {node.axis.label}: {what} {objects_text(gives)} but its "
                            f"step takes the state {objects_text(state)}")
                    if _renamed(prob):
                        ck.warning("scan-state", f"{text} (axes of the same sizes: the "
                                   "recurrence runs on them)", path + where, titles,
                                   prob.axes_involved())
                    else:
                        ck.error("scan-state", text, path + where, titles,
                                 prob.axes_involved())
                    break
    n, size = node.n, node.axis.size
    if isinstance(n, sympy.Integer) and isinstance(size, sympy.Integer) and n != size:
        ck.error("scan-steps", f"Scan over {node.axis.label} runs {n} steps but the axis has "
                 f"{size} positions", path, titles)
    tuple(node.dom)  # step_x_l_positions that do not fit raise: the checker's type-error


def check_coupled_scan(ck, node: CoupledScan, path: str, titles) -> None:
    """``scan-steps`` as for a Scan; a coupled scan whose steps, bases and state lists do not
    fit (``type-error``, raised by its typing)."""
    n, size = node.n, node.axis.size
    if isinstance(n, sympy.Integer) and isinstance(size, sympy.Integer) and n != size:
        ck.error("scan-steps", f"Scan over {node.axis.label} runs {n} steps but the axis has "
                 f"{size} positions", path, titles)
    tuple(node.dom)
    tuple(node.cod)


__all__ = ["check_coupled_scan", "check_scan"]
