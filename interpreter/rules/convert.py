"""``TypeConvert`` (docs/format.md §11.21) and ``Cast`` (§11.11): identity on values (stored in the
output kind's dtype). emulate mode rounds a ``TypeConvert``'s result to its ``target`` in the
evaluator, once the result lies in its output layout (block scales group along the wire's last
axis; see ``QUANT_POLICY.md``). ``Cast`` only retypes naturals and never rounds."""
from __future__ import annotations

from ncdc.ir.operators import Cast, TypeConvert

from ..registry import rule
from ..values import Value, as_kind


@rule(TypeConvert, Cast)
def convert(b, inputs, ctx):
    (v,) = inputs
    return [Value(as_kind(v.values, b.output_weaves[0].datatype), v.live)]
