"""Writing an array, whole or piece by piece, into a generated module's member, given in the
interpreter's layout (``[in..., out...]`` for a linear map).

A plain tensor member is written through a view of it in the interpreter's layout. A member held
in a block-scaled storage format (a ``StoredWeight`` of a module generated with a storage
policy: E4M3 or packed E2M1 ``codes`` and one scale per group of 32 values along a *run*) is
encoded run by run: a piece of the array (one expert of a stacked family) that covers whole runs
is encoded into exactly its rows, so neither the checkpoint's float values nor a float copy of
the member ever exist whole. A piece that cuts runs (stacked along a run axis) is gathered into
one float32 array first.
"""
from __future__ import annotations

import math

from .errors import CheckpointError


def is_stored(member) -> bool:
    """Whether ``member`` is a storage-format weight (duck-typed: ``encode_``, ``codes``)."""
    return hasattr(member, "encode_") and hasattr(member, "codes")


def interpreter_view(target, layout, shape):
    """A view of a module tensor in the interpreter's layout ``shape``: an ``nn.Linear``'s
    ``[out, in]`` weight seen as ``[in..., out...]`` (``PARAM_LAYOUT``), its bias as
    ``[out...]``; any other tensor as it is. Writing into the view writes the module."""
    if layout is not None and layout[0]:
        return target.T.view(shape)
    return target.view(shape)


class TensorWriter:
    """Pieces copied into a view of a tensor member."""

    def __init__(self, target, layout, shape):
        self.target = target
        self.view = interpreter_view(target, layout, shape)

    def shape_at(self, index) -> tuple[int, ...]:
        return tuple(self.view[index].shape)

    def write(self, index, value) -> None:
        self.view[index].copy_(value)

    def finish(self) -> None:
        pass


class StoredWriter:
    """Pieces encoded into a StoredWeight's rows (see the module docstring). ``encode_runs``:
    the generated file's encoder, ``(runs [rows, run], format) -> (codes, scales)``."""

    CHUNK = 1 << 20  # values encoded at once

    def __init__(self, member, layout, shape, encode_runs):
        self.member, self.shape, self.encode = member, tuple(shape), encode_runs
        nd = len(shape)
        if layout is not None and layout[0]:        # StoredLinear: rows = out, run = in
            run_dims = list(range(layout[0]))
        elif 0 < member.lead < nd:                  # runs over the leading (input) dims
            run_dims = list(range(member.lead))
        elif member.lead >= nd:
            run_dims = list(range(nd))
        else:
            run_dims = [nd - 1] if nd else []
        self.run_dims = run_dims
        self.row_dims = [d for d in range(nd) if d not in run_dims]
        self.run = math.prod(shape[d] for d in run_dims)
        self.gathered = None
        self.plain = getattr(member, "scales", None) is None
        if self.plain:
            self.view = interpreter_view(member.codes, layout, shape)

    def shape_at(self, index) -> tuple[int, ...]:
        import torch

        return tuple(torch.empty(self.shape, device="meta")[index].shape)

    def _encode_rows(self, rows, runs) -> None:
        step = max(1, self.CHUNK // max(self.run, 1))
        for r0 in range(0, runs.shape[0], step):
            part = runs[r0:r0 + step]
            if not part.is_floating_point() or part.dtype not in (self.float64, self.float32):
                part = part.to(self.float32)
            codes, scales = self.encode(part, self.member.format)
            where = rows[r0:r0 + step]
            for held, new in ((self.member.codes, codes), (self.member.scales, scales)):
                bits = _bits(held)  # FP8 dtypes have no index_put: write their bytes
                bits[where] = new.view(bits.dtype) if new.dtype != bits.dtype else new

    def write(self, index, value) -> None:
        import torch

        self.float32, self.float64 = torch.float32, torch.float64
        if self.plain:
            self.view[index].copy_(value)
            return
        axes = [i for i, ix in enumerate(index) if not isinstance(ix, slice)]
        if any(a in self.run_dims for a in axes):   # the piece cuts runs: gather first
            if self.gathered is None:
                self.gathered = torch.empty(self.shape, dtype=torch.float32)
            self.gathered[index] = value
            return
        row_shape = [self.shape[d] for d in self.row_dims]
        ids = torch.arange(math.prod(row_shape)).view(row_shape) if row_shape else \
            torch.zeros((), dtype=torch.long)
        sel = tuple(index[d] if d < len(index) else slice(None) for d in self.row_dims)
        rows = ids[sel].reshape(-1)
        kept = [d for d in range(len(self.shape)) if d not in axes]   # the piece's axes
        order = [kept.index(d) for d in self.row_dims if d in kept] + \
            [kept.index(d) for d in self.run_dims]
        runs = value.permute(*order).reshape(-1, self.run) if value.dim() else value.reshape(1, 1)
        if runs.shape[0] != rows.numel():
            raise CheckpointError(f"internal: {runs.shape[0]} runs for {rows.numel()} rows")
        self._encode_rows(rows, runs)

    def finish(self) -> None:
        if self.gathered is not None:
            import torch

            self.float32, self.float64 = torch.float32, torch.float64
            self.gathered, full = None, self.gathered
            self.write((), full)


def _bits(t):
    """``t`` viewed as unsigned integers of its width (FP8 codes and scales as bytes)."""
    import torch

    if t.is_floating_point() and t.element_size() == 1:
        return t.view(torch.uint8)
    return t


def writer_for(member, layout, shape, namespace):
    """The writer of ``member`` (a tensor or a StoredWeight) for an array of ``shape``."""
    if is_stored(member):
        return StoredWriter(member, layout, shape, namespace.encode_runs)
    return TensorWriter(member, layout, shape)


__all__ = ["StoredWriter", "TensorWriter", "interpreter_view", "is_stored", "writer_for"]
