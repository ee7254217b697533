"""A Linear layer as the spec's Linear operators are initialised (pasted into generated files when
used): an ``nn.Linear`` (so tools that look for ``nn.Linear`` find it) whose weight is normal with
std ``in_features ** -0.5`` and whose bias is zero, as ncdc's reference interpreter draws them;
and ``linears``, several such layers of one input as one product (``codegen/siblings.py``)."""

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Linear):
    """``nn.Linear`` with the spec's initialisation (weight std ``in_features ** -0.5``, bias 0)."""

    def reset_parameters(self):
        nn.init.normal_(self.weight, std=self.in_features ** -0.5)
        if self.bias is not None:
            nn.init.zeros_(self.bias)


def linears(x, *layers):
    """``tuple(layer(x) for layer in layers)``: one product of the stacked weights where every
    layer is a plain ``Linear`` (no hooks, plain parameters, biases all or none); otherwise (an
    adapter, a hook, a sharded or stored weight) each layer is called."""
    hooks = nn.modules.module
    plain = not (hooks._global_forward_hooks or hooks._global_forward_pre_hooks) and all(
        type(m) is Linear and not (m._forward_hooks or m._forward_pre_hooks)
        and type(m.weight) is nn.Parameter and type(m.bias) is type(layers[0].bias)
        for m in layers)
    if not plain:
        return tuple(m(x) for m in layers)
    bias = None if layers[0].bias is None else torch.cat([m.bias for m in layers])
    out = F.linear(x, torch.cat([m.weight for m in layers]), bias)
    return out.split([m.out_features for m in layers], dim=-1)
