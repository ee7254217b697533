"""Weights held in storage formats and dequantized at use (pasted into generated files when a
``--weights`` policy names some weights).

Formats: ``float32``, ``bfloat16`` (the values in that dtype), ``mxfp8`` (``float8_e4m3fn``
codes) and ``mxfp4`` (E2M1 codes packed two to a ``uint8``, the element at the even position in
the low nibble), both with one ``float8_e8m0fnu`` scale per group of 32 consecutive values.
The layout is StoredWeight's docstring.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

MX_GROUP = 32
MX_TOP = {"mxfp8": 448.0, "mxfp4": 6.0}
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # by code; bit 3 is the sign
STORED_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                 "mxfp8": torch.float8_e4m3fn, "mxfp4": torch.uint8}
SAME_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16,
             torch.float8_e4m3fn: torch.uint8, torch.float8_e8m0fnu: torch.uint8,
             torch.uint8: torch.uint8}
INIT_CHUNK = 1 << 20  # values drawn and encoded at once by the initialisers


def run_layout(shape, lead=0):
    """(rows, run, transposed): ``shape`` seen as ``rows`` runs of ``run`` values."""
    shape = tuple(shape)
    if not shape:
        return 1, 1, False
    if 0 < lead < len(shape):
        return math.prod(shape[lead:]), math.prod(shape[:lead]), True
    if lead >= len(shape):
        return 1, math.prod(shape), False
    return math.prod(shape[:-1]), shape[-1], False


def nearest_e2m1(v):
    """The E2M1 code of ``0 <= v <= 6`` (a Python float): nearest value, ties to the even code."""
    return min(range(8), key=lambda c: (abs(E2M1_VALUES[c] - v), c % 2))


# Every tie and boundary of E2M1 rounding sits on a multiple of 1/4, so with q = 4|x| the code
# is fixed by ceil(q) + floor(q) (2i at q = i, 2i + 1 inside (i, i + 1)): a table of 49
# magnitudes' codes, then the same with the sign bit for negative x.
E2M1_TABLE = (tuple(nearest_e2m1(k / 8) for k in range(49))
              + tuple(8 | nearest_e2m1(k / 8) for k in range(48, -1, -1)))


def e2m1_codes(x):
    """E2M1 codes (uint8, sign in bit 3) of float32 ``x`` (``|x| <= 6``), rounded to nearest,
    ties to even."""
    q = x * 4
    index = q.ceil() + q.floor() + 97 * torch.signbit(x)  # negative x: 49 + 48 - (2i or 2i + 1)
    table = torch.tensor(E2M1_TABLE, dtype=torch.uint8, device=x.device)
    return table[index.long()]


def float32_odd(x):
    """float64 ``x`` in float32 rounded to odd: an inexact value becomes the one of its two
    float32 neighbours whose last bit is odd. Rounding that to nearest-even in any format of at
    most 22 significant bits (bfloat16, E4M3, E2M1) gives what rounding ``x`` itself would;
    rounding ``x`` to nearest float32 first could land on a tie of the narrower format and round
    twice (torch's float64 -> bfloat16 conversion does that, ml_dtypes' does not)."""
    near = x.to(torch.float32)
    wide = near.to(torch.float64)
    even = (near.view(torch.int32) & 1) == 0
    step = torch.nextafter(near, torch.where(wide < x, math.inf, -math.inf).to(torch.float32))
    return torch.where(even & (wide != x) & near.isfinite(), step, near)


def encode_runs(runs, fmt):
    """(codes, scales) of ``runs`` (a float tensor ``[rows, run]``) in an MX format; the
    elements are scaled in the input's precision (float32, or float64), exactly, then rounded
    once to nearest-even, as ml_dtypes' conversions round (float64 goes through
    :func:`float32_odd`)."""
    run = runs.shape[-1]
    wide = torch.float64 if runs.dtype == torch.float64 else torch.float32
    values = runs.to(wide)
    if run % MX_GROUP:
        values = F.pad(values, (0, -run % MX_GROUP))
    groups = values.unflatten(-1, (-1, MX_GROUP))
    amax = groups.abs().amax(-1).to(torch.float64).clamp(min=1e-4)
    mantissa, exponent = torch.frexp(amax / MX_TOP[fmt])
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)  # least 2^e >= amax / top
    scales = (exponent + 127).to(torch.uint8).view(torch.float8_e8m0fnu)
    scaled = groups * torch.exp2(-exponent.to(wide))[..., None]  # a power of two: exact
    scaled = scaled.flatten(-2)[..., :run]
    scaled = float32_odd(scaled) if wide == torch.float64 else scaled
    if fmt == "mxfp8":
        return scaled.to(torch.float8_e4m3fn), scales
    codes = e2m1_codes(scaled)
    if run % 2:
        codes = F.pad(codes, (0, 1))
    return codes[..., 0::2] | (codes[..., 1::2] << 4), scales


def decode_runs(codes, scales, fmt, run, dtype):
    """The values ``[rows, run]`` of MX ``codes`` and ``scales``, in ``dtype`` (computed in
    float64 for float64, else in float32: exact wherever the value is finite there)."""
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    if fmt == "mxfp4":
        table = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=wide,
                             device=codes.device)
        nibbles = torch.stack((codes & 15, codes >> 4), dim=-1).flatten(-2)[..., :run]
        values = table[nibbles.long()]
    else:
        values = codes.to(wide)
    factors = scales.to(wide).repeat_interleave(MX_GROUP, dim=-1)[..., :run]
    return (values * factors).to(dtype)


class StoredWeight(nn.Module):
    """A real array of ``shape`` held in a storage format: ``codes`` and, in MX formats,
    ``scales``, both non-trainable parameters (weights that optimizers and autograd leave
    alone). ``dequantize()`` gives its value in the compute dtype, which follows ``.to(dtype)``
    while the stored tensors keep theirs; ``nn.init.normal_``, ``zeros_`` and ``ones_`` fill it
    chunk by chunk, never holding it whole in float32.

    Layout (ncdc's ``ir/weight_formats.py``, as the reference interpreter encodes): an array of
    ``shape`` is held as ``rows`` runs of ``run`` values, and MX scale groups run along:

    * a Linear weight: its input dims (the dims it contracts), flattened. Held as the
      interpreter's ``[in..., out...]`` it has ``lead`` = the number of input dims, and a run is
      the flattened input dims at one flattened output index (``codes[r, i] ~ w.reshape(run,
      rows)[i, r]``); held as nn.Linear's ``[out, in]`` it has ``lead`` 0: its rows are its runs.
    * every other array (a Linear's bias, a gain, a table, any N-dim parameter): its trailing
      dim, with ``lead`` 0. Such an array keeps the interpreter's shape, so a bias over two
      output dims ``[4, 4]`` is 4 runs of 4 (``StoredLinear``'s ``bias_shape``), not one of 16.

    Groups of 32 are cut from the start of each run; a run whose length is not a multiple of 32
    ends in a partial group. The scale of a group is ``2^ceil(log2(max(amax, 1e-4) / top))``
    (top: 448 for E4M3, 6 for E2M1), so no element saturates; elements round to nearest-even.
    """

    def __init__(self, shape, format, lead=0):
        super().__init__()
        self.shape = torch.Size(shape)
        self.format = format
        self.lead = lead
        rows, run, _ = run_layout(self.shape, lead)
        if format in MX_TOP:
            width = run if format == "mxfp8" else (run + 1) // 2
            codes = torch.empty(rows, width, dtype=STORED_DTYPES[format])
            scales = torch.empty(rows, -(-run // MX_GROUP), dtype=torch.float8_e8m0fnu)
            self.scales = nn.Parameter(scales, requires_grad=False)
        else:
            codes = torch.empty(self.shape, dtype=STORED_DTYPES[format])
            self.register_parameter("scales", None)
        self.codes = nn.Parameter(codes, requires_grad=False)
        self.register_buffer("compute", torch.empty(0), persistent=False)  # its dtype only

    def extra_repr(self):
        return f"shape={tuple(self.shape)}, format={self.format!r}, lead={self.lead}"

    def _apply(self, fn, recurse=True):
        """Device moves and ``to_empty`` reach the stored tensors, dtype casts do not: ``fn``
        sees them as integers of the same width. The compute dtype follows ``fn``."""
        for name in ("codes", "scales"):
            p = self._parameters[name]
            if p is not None:
                moved = fn(p.detach().view(SAME_BITS[p.dtype])).view(p.dtype)
                self._parameters[name] = nn.Parameter(moved, requires_grad=False)
        self._buffers["compute"] = fn(self._buffers["compute"])
        return self

    # -- reading ----------------------------------------------------------------------------
    def dequantize(self):
        """The array's values, ``shape``, in the compute dtype."""
        return self._values(self.codes, self.scales, self.shape)

    def select(self, dim, index):
        """``dequantize().select(dim, index)``, decoding only the runs the slice needs when
        ``dim`` does not cut runs (an expert's slice of a stacked expert weight)."""
        _rows, _run, transposed = run_layout(self.shape, self.lead)
        first = self.lead if transposed else 0
        last = len(self.shape) if transposed else len(self.shape) - 1
        dim = dim % len(self.shape)
        if self.scales is None or not first <= dim < last:
            return self.dequantize().select(dim, index)
        row_dims = self.shape[first:last]
        codes = self.codes.unflatten(0, row_dims).select(dim - first, index)
        scales = self.scales.unflatten(0, row_dims).select(dim - first, index)
        codes, scales = codes.reshape(-1, codes.shape[-1]), scales.reshape(-1, scales.shape[-1])
        return self._values(codes, scales, self.shape[:dim] + self.shape[dim + 1:])

    def __getitem__(self, index):
        """``dequantize()[index]`` for an index into the first dim (a table lookup), decoding
        only the rows it picks when that dim does not cut runs."""
        if self.scales is None:
            return self.codes[index].to(self.compute.dtype)
        if self.lead or len(self.shape) < 2:
            return self.dequantize()[index]
        row_dims = self.shape[:-1]
        codes = self.codes.reshape(*row_dims, -1)[index]
        scales = self.scales.reshape(*row_dims, -1)[index]
        picked = codes.shape[:-1] + self.shape[-1:]
        values = decode_runs(codes.reshape(-1, codes.shape[-1]),
                             scales.reshape(-1, scales.shape[-1]), self.format, self.shape[-1],
                             self.compute.dtype)
        return values.reshape(picked)

    def _values(self, codes, scales, shape):
        dtype = self.compute.dtype
        if scales is None:
            return codes.to(dtype)
        _, run, transposed = run_layout(shape, self.lead)
        runs = decode_runs(codes, scales, self.format, run, dtype)
        return runs.t().reshape(shape) if transposed else runs.reshape(shape)

    # -- slicing (expert parallel: codegen/prelude/distributed.py) ---------------------------
    def row_axis(self, dim):
        """Where dim ``dim`` of the array lies in ``rows_view`` of ``codes`` and ``scales``.
        Only a dim that indexes runs has one in an MX format (a run and its scale groups lie
        along the other dims): ValueError for a dim the runs lie along."""
        dim = dim % len(self.shape)
        if self.scales is None:
            return dim
        _rows, _run, transposed = run_layout(self.shape, self.lead)
        first = self.lead if transposed else 0
        last = len(self.shape) if transposed else len(self.shape) - 1
        if not first <= dim < last:
            raise ValueError(f"a {self.format} weight of shape {tuple(self.shape)} (lead "
                             f"{self.lead}) holds its scale groups along dim {dim}: it cannot "
                             "be cut there")
        return dim - first

    def rows_view(self, t):
        """``codes`` or ``scales`` (``t``) with their rows unflattened to the array's row dims
        (in a plain format ``codes`` has the array's shape already)."""
        if self.scales is None:
            return t
        _rows, _run, transposed = run_layout(self.shape, self.lead)
        row_dims = self.shape[self.lead:] if transposed else self.shape[:-1]
        return t.unflatten(0, row_dims) if row_dims else t

    def narrow(self, dim, start, length):
        """A StoredWeight holding ``dequantize().narrow(dim, start, length)``: the slices of
        ``codes`` and ``scales`` along the rows ``dim`` indexes, copied without decoding (any
        device, meta included; the values and scales are the whole weight's, bit for bit)."""
        axis = self.row_axis(dim)
        dim = dim % len(self.shape)
        shape = self.shape[:dim] + (length,) + self.shape[dim + 1:]
        with torch.device("meta"):
            part = StoredWeight(shape, self.format, self.lead)
        for name in ("codes", "scales"):
            t = self._parameters[name]
            if t is not None:
                cut = self.rows_view(t.detach()).narrow(axis, start, length).clone()
                flat = cut if self.scales is None else cut.reshape(-1, t.shape[-1])
                part._parameters[name] = nn.Parameter(flat, requires_grad=False)
        part._buffers["compute"] = self._buffers["compute"]
        return part

    # -- writing ----------------------------------------------------------------------------
    @torch.no_grad()
    def encode_(self, values):
        """Hold ``values`` (any real tensor of ``shape``), encoded in chunks of runs."""
        values = torch.as_tensor(values)
        if self.scales is None:
            if values.dtype == torch.float64 and self.codes.dtype == torch.bfloat16:
                values = float32_odd(values)  # one rounding, not two
            self.codes.copy_(values.reshape(self.shape))
            return self
        rows, run, transposed = run_layout(self.shape, self.lead)
        runs = values.reshape(run, rows).t() if transposed else values.reshape(rows, run)
        return self._fill(lambda r0, n: runs[r0:r0 + n].to(self.codes.device))

    @torch.no_grad()
    def normal_(self, mean=0.0, std=1.0, generator=None):
        """Hold normal values: drawn in float32 and encoded a chunk at a time."""
        if self.scales is None:
            self.codes.normal_(mean, std, generator=generator)
            return self
        run = run_layout(self.shape, self.lead)[1]
        return self._fill(lambda r0, n: torch.empty(n, run, device=self.codes.device).normal_(
            mean, std, generator=generator))

    @torch.no_grad()
    def fill_(self, value):
        if self.scales is None:
            self.codes.fill_(value)
            return self
        run = run_layout(self.shape, self.lead)[1]
        return self._fill(lambda r0, n: torch.full((n, run), float(value),
                                                   device=self.codes.device))

    def zero_(self):
        return self.fill_(0.0)

    def _fill(self, chunk):
        """Encode ``chunk(first row, row count)`` into each block of rows in turn."""
        if self.codes.device.type == "meta":
            return self
        rows, run, _ = run_layout(self.shape, self.lead)
        step = max(1, INIT_CHUNK // max(run, 1))
        for r0 in range(0, rows, step):
            n = min(step, rows - r0)
            codes, scales = encode_runs(chunk(r0, n), self.format)
            self.codes[r0:r0 + n] = codes
            self.scales[r0:r0 + n] = scales
        return self

    # -- what loaders ask of a tensor -------------------------------------------------------
    def numel(self):
        return self.shape.numel()

    def dim(self):
        return len(self.shape)

    def is_floating_point(self):
        return True

    def is_complex(self):
        return False


def stored_or_parameter(shape, format):
    """A StoredWeight in ``format``, or (no format) a float parameter of ``shape``."""
    if format is None:
        return nn.Parameter(torch.empty(shape))
    return StoredWeight(shape, format)


def value_of(weight):
    """A parameter's value: a StoredWeight dequantized, a tensor (or None) as it is."""
    return weight.dequantize() if isinstance(weight, StoredWeight) else weight


class StoredLinear(nn.Module):
    """The spec's Linear (weight normal with std ``in_features ** -0.5``, bias 0) with its
    weight ``[out, in]`` and/or bias held in storage formats, dequantized at each call. The
    bias has ``bias_shape`` (the output dims, default ``(out_features,)``), flattened at use:
    a stored bias groups its scales along its last output dim (see StoredWeight)."""

    def __init__(self, in_features, out_features, bias=True, *, weight_format=None,
                 bias_format=None, bias_shape=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = stored_or_parameter((out_features, in_features), weight_format)
        if bias:
            self.bias = stored_or_parameter(tuple(bias_shape or (out_features,)), bias_format)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}"

    def reset_parameters(self):
        nn.init.normal_(self.weight, std=self.in_features ** -0.5)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x):
        bias = value_of(self.bias)
        return F.linear(x, value_of(self.weight), None if bias is None else bias.reshape(-1))
