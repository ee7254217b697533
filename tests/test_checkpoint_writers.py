"""Pieces of a stacked array encoded row by row into a block-scaled member give exactly the
codes and scales of encoding the whole array at once (the reference interpreter's encoder,
``interpreter.storage_policy.encode``), for every stack axis and layout."""
from __future__ import annotations

import numpy as np
import pytest

from ncdc.checkpoint.writers import StoredWriter, TensorWriter
from ncdc.interpreter.storage_policy import encode
from tests.lazy import torch


def encode_runs(runs, fmt):
    st = encode(runs.to(torch.float64).numpy(), fmt, 0)
    codes = torch.from_numpy(st.codes.view(np.uint8).copy())
    scales = torch.from_numpy(st.scales.view(np.uint8).copy())
    return codes, scales


class FakeStored:
    """The members of a StoredWeight a writer touches (codes and scales as uint8)."""

    def __init__(self, shape, fmt, lead):
        rows, run = _layout(shape, lead)
        self.format, self.lead, self.shape = fmt, lead, shape
        width = run if fmt == "mxfp8" else (run + 1) // 2
        self.codes = torch.zeros(rows, width, dtype=torch.uint8)
        self.scales = torch.zeros(rows, -(-run // 32), dtype=torch.uint8)

    def encode_(self, values):
        raise AssertionError("not used")


def _layout(shape, lead):
    if 0 < lead < len(shape):
        return int(np.prod(shape[lead:])), int(np.prod(shape[:lead]))
    return int(np.prod(shape[:-1])), shape[-1]


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4"])
@pytest.mark.parametrize("shape, lead, axis", [
    ((48, 5, 40), 1, 1),     # W^{G}[m, k/e, f]: runs over m, stacked along the expert axis
    ((40, 5, 48), 1, 1),     # W^{D}[f, k/e, m]
    ((5, 40, 70), 0, 0),     # runs along the trailing axis, stacked along the first
    ((48, 5, 40), 1, 0),     # stacked along the run axis: gathered, then encoded
])
def test_piecewise_encoding_equals_whole(fmt, shape, lead, axis):
    x = np.random.default_rng(0).normal(size=shape) * np.exp(
        np.random.default_rng(1).normal(size=shape))
    whole = encode(x, fmt, lead)
    member = FakeStored(shape, fmt, lead)
    w = StoredWriter(member, None, shape, encode_runs)
    for i in range(shape[axis]):
        index = (slice(None),) * axis + (i,)
        assert w.shape_at(index) == x[index].shape
        w.write(index, torch.from_numpy(x[index]))
    w.finish()
    np.testing.assert_array_equal(member.codes.numpy(), whole.codes.view(np.uint8))
    np.testing.assert_array_equal(member.scales.numpy(), whole.scales.view(np.uint8))


def test_linear_layout_runs_are_inputs():
    """An [out, in] StoredLinear weight: the interpreter's [in..., out...] array, runs over
    the inputs, as the interpreter encodes a Linear weight with lead = input dims."""
    shape = (6, 8, 40)            # in = 6 x 8, out = 40
    x = np.random.default_rng(2).normal(size=shape)
    whole = encode(x, "mxfp8", 2)
    member = FakeStored((40, 48), "mxfp8", 0)
    w = StoredWriter(member, (2, 1), shape, encode_runs)
    w.write((), torch.from_numpy(x))
    np.testing.assert_array_equal(member.codes.numpy(), whole.codes.view(np.uint8))


def test_tensor_writer_writes_through_the_linear_view():
    target = torch.zeros(40, 48)   # nn.Linear [out, in]
    x = torch.randn(6, 8, 40)
    w = TensorWriter(target, (2, 1), (6, 8, 40))
    for i in range(6):
        w.write((i,), x[i])
    torch.testing.assert_close(target, x.reshape(48, 40).T, rtol=0, atol=0)
