"""A Linear layer as the spec's Linear operators are initialised (pasted into generated files when
used): an ``nn.Linear`` (so tools that look for ``nn.Linear`` find it) whose weight is normal with
std ``in_features ** -0.5`` and whose bias is zero, as ncdc's reference interpreter draws them.

Its product is ``F.linear``'s, with two changes of kernel for a 16-bit product on the CPU with
few outputs (the mHC's coefficients, a router's scores), where the CPU's 16-bit kernels are slow:
at most 8 rows and 64 outputs, it is computed in float32 and rounded once, as the 16-bit kernel
rounds its float32 sums (19 against 8 us at 2,048 inputs and 4 outputs, one row); at least 32
rows and fewer than 32 outputs, it is the transposed product ``W x^T`` (203 against 80 us at 256
rows). Each gives the numbers of ``F.linear`` up to the order of the float32 sums.

Several Linears reading one input (the mHC's three coefficient maps) are one product,
``linears(x, *layers)``: the input is read once and the kernel called once. A batched vector
times a matrix is ``vecmat(v, m)``, summed row by row in float32 where the 16-bit batched
kernel is slow (the mHC's collapse)."""

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Linear):
    """``nn.Linear`` with the spec's initialisation (weight std ``in_features ** -0.5``, bias 0);
    a 16-bit CPU product with few outputs takes a faster kernel (codegen/prelude/linear.py)."""

    def reset_parameters(self):
        nn.init.normal_(self.weight, std=self.in_features ** -0.5)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x):
        return linear(x, self.weight, self.bias)


def linear(x, weight, bias=None):
    """``F.linear(x, weight, bias)``; a 16-bit CPU product with few outputs, where the CPU's
    16-bit kernel is slow, is summed in float32 and rounded once (at most 8 rows) or is the
    transposed product ``W x^T`` (at least 32 rows): the same float32 sums in another order."""
    if x.dtype in (torch.bfloat16, torch.float16) and x.device.type == "cpu":
        n_out, n_in = weight.shape
        rows = x.numel() // n_in
        if rows <= 8 and n_out <= 64:  # float32 sums, rounded once
            bias = None if bias is None else bias.float()
            return F.linear(x.float(), weight.float(), bias).to(x.dtype)
        if rows >= 32 and n_out < 32:  # the transposed product
            flat = x.reshape(rows, n_in).t()
            out = (torch.mm(weight, flat) if bias is None
                   else torch.addmm(bias[:, None], weight, flat))
            return out.t().reshape(*x.shape[:-1], n_out)
    return F.linear(x, weight, bias)


def _hooked(m):
    """Whether module ``m`` has a hook of its own."""
    return bool(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks
                or m._backward_pre_hooks)


def _global_hooks():
    """Whether a hook is registered for every module."""
    g = nn.modules.module
    return bool(g._global_forward_hooks or g._global_forward_pre_hooks
                or g._global_backward_hooks or g._global_backward_pre_hooks)


def linears(x, *layers):
    """``tuple(layer(x) for layer in layers)``: one product over the weights stacked, which reads
    ``x`` once, where the weights are fewer numbers than ``x`` (stacking copies them: at
    256 tokens the mHC's three maps of 2,048 inputs, not one token's) and always under
    ``torch.compile`` or ``torch.export`` (no guard on the token count); else each layer called.
    Each is called also where one is not a plain ``Linear``, carries a hook (a wrapper such as
    a LoRA adapter, or a hook reading the call, sees it) or has a bias where another has none."""
    few = torch.compiler.is_compiling() or sum(m.weight.numel() for m in layers) <= x.numel()
    if not few or _global_hooks() or any(
            type(m) is not Linear or _hooked(m) or (m.bias is None) != (layers[0].bias is None)
            for m in layers):
        return tuple(m(x) for m in layers)
    weight = torch.cat([m.weight for m in layers])
    bias = None if layers[0].bias is None else torch.cat([m.bias for m in layers])
    return linear(x, weight, bias).split([m.out_features for m in layers], dim=-1)


def vecmat(v, m):
    """``torch.matmul(v.unsqueeze(-2), m).squeeze(-2)``: the rows of each matrix ``m[..., k, :]``
    summed with the weights ``v[..., k]``. Where the CPU's batched 16-bit kernel is slow, over
    at most 8 rows for at least 32 vectors (the mHC's collapse of four streams: 259 against
    173 us at 256 tokens), the rows are summed one at a time in float32, where the products of
    16-bit numbers are exact, and the sum is rounded once, as that kernel rounds its sums."""
    k = m.shape[-2]
    if (m.dtype in (torch.bfloat16, torch.float16) and v.dtype == m.dtype and k <= 8
            and m.device.type == "cpu" and v.numel() >= 32 * k
            and not torch.compiler.is_compiling()):
        w = v.float()
        out = m[..., 0, :] * w[..., 0:1]
        for i in range(1, k):
            out.addcmul_(m[..., i, :], w[..., i:i + 1])
        return out.to(m.dtype)
    return torch.matmul(v.unsqueeze(-2), m).squeeze(-2)
