"""A Linear layer as the spec's Linear operators are initialised (pasted into generated files when
used): an ``nn.Linear`` (so tools that look for ``nn.Linear`` find it) whose weight is normal with
std ``in_features ** -0.5`` and whose bias is zero, as ncdc's reference interpreter draws them.

Its product is ``F.linear``'s, with two changes of kernel for a 16-bit product on the CPU with
few outputs (the mHC's coefficients, a router's scores), where the CPU's 16-bit kernels are slow:
at most 8 rows and 64 outputs, it is computed in float32 and rounded once, as the 16-bit kernel
rounds its float32 sums (19 against 8 us at 2,048 inputs and 4 outputs, one row); at least 32
rows and at most 16 outputs, it is the transposed product ``W x^T`` (203 against 80 us at 256
rows). Each gives the numbers of ``F.linear`` up to the order of the float32 sums."""

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
        if x.dtype in (torch.bfloat16, torch.float16) and x.device.type == "cpu":
            rows = x.numel() // self.in_features
            if rows <= 8 and self.out_features <= 64:  # float32 sums, rounded once
                bias = None if self.bias is None else self.bias.float()
                return F.linear(x.float(), self.weight.float(), bias).to(x.dtype)
            if rows >= 32 and self.out_features <= 16:  # the transposed product
                flat = x.reshape(rows, self.in_features).t()
                out = (torch.mm(self.weight, flat) if self.bias is None
                       else torch.addmm(self.bias[:, None], self.weight, flat))
                return out.t().reshape(*x.shape[:-1], self.out_features)
        return F.linear(x, self.weight, self.bias)
