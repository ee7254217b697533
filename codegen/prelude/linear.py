"""A Linear layer as the spec's Linear operators are initialised (pasted into generated files when
used): an ``nn.Linear`` (so tools that look for ``nn.Linear`` find it) whose weight is normal with
std ``in_features ** -0.5`` and whose bias is zero, as ncdc's reference interpreter draws them."""

from torch import nn


class Linear(nn.Linear):
    """``nn.Linear`` with the spec's initialisation (weight std ``in_features ** -0.5``, bias 0)."""

    def reset_parameters(self):
        nn.init.normal_(self.weight, std=self.in_features ** -0.5)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
