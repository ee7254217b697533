"""The dtype a generated forward computes in, as code (codegen/PRECISION.md).

A generated module holds no dtype of its own (a block may have no parameters), so its forward
computes in the dtype of its first real input: ``module.to(dtype)`` moves the parameters and the
caller passes inputs of that dtype. Values that need more range or precision than a 16-bit
dtype has are computed in :func:`wide_real` (float32 at least) and rounded back once. Each
function takes the forward's input wires; rules reach them through :class:`codegen.ctx.Ctx`.
"""
from __future__ import annotations

from ncdc.ir.datatypes import kind

DEFAULT = "torch.get_default_dtype()"


def real_dtype(inputs) -> str:
    """Code for the forward's real dtype: its first real input's, else torch's default."""
    for w in inputs:
        if kind(w.array.datatype) == "real":
            return f"{w.var}.dtype"
    return DEFAULT


def device(inputs) -> str | None:
    """Code for the forward's device (its first input's), or None in a nullary forward."""
    return f"{inputs[0].var}.device" if inputs else None


def wide_real(inputs) -> str:
    """Code for float32 at least: float64 stays float64, 16-bit dtypes widen."""
    return f"torch.promote_types({real_dtype(inputs)}, torch.float32)"


def complex_dtype(inputs) -> str:
    """Complex arithmetic runs in complex64 at least (complex32 lacks most operations);
    spelled as a comparison, which ``torch.compile(fullgraph=True)`` traces."""
    return f"torch.complex128 if {real_dtype(inputs)} == torch.float64 else torch.complex64"
