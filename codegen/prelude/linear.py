"""A Linear layer as the spec's Linear operators are initialised (pasted into generated files when
used): an ``nn.Linear`` (so tools that look for ``nn.Linear`` find it) whose weight is normal with
std ``in_features ** -0.5`` and whose bias is zero, as ncdc's reference interpreter draws them.

Its product is ``F.linear``'s, with one change of kernel: a 16-bit product on the CPU with at most
8 rows and at most 64 outputs (the mHC's coefficients and a router's scores in a decode step) is
computed in float32 and rounded once, as the 16-bit kernel rounds its float32 sums (the two
differ only in the order of those sums); at that shape the CPU's 16-bit kernels take about twice
as long (19 against 8 us at 2,048 inputs and 4 outputs)."""

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Linear):
    """``nn.Linear`` with the spec's initialisation (weight std ``in_features ** -0.5``, bias 0);
    a 16-bit CPU product of at most 8 rows and 64 outputs is computed in float32, rounded once."""

    def reset_parameters(self):
        nn.init.normal_(self.weight, std=self.in_features ** -0.5)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x):
        if (x.dtype in (torch.bfloat16, torch.float16) and x.device.type == "cpu"
                and self.out_features <= 64 and x.numel() <= 8 * self.in_features):
            bias = None if self.bias is None else self.bias.float()
            return F.linear(x.float(), self.weight.float(), bias).to(x.dtype)
        return F.linear(x, self.weight, self.bias)
