"""One IR class per operator kind, grouped by family."""
from .base import Operator
from .boxes import BlockOperator, ParaBlockOperator
from .contraction import Einops, Embedding, Linear
from .elementwise import (
                          Arithmetic,
                          Cast,
                          Decomplex,
                          Elementwise,
                          GenericOperator,
                          Identity,
                          PairsAsComplex,
                          TypeConvert,
)
from .folds import AdditionOp, BitwiseXor, Maximum, Modulo
from .legacy import WeightedTriangularLower
from .normalisation import L1Norm, Normalize, SoftMax
from .selection import IndexSelect, Select, SelectionForm, TopK
from .sources import FixedArray, Rotary, YarnRotary
from .tensorlogic import TensorEquation
from .views import ConcatenateAxes, CovariantView, DeconcatenateAxes, View

ALL_OPERATORS: tuple[type[Operator], ...] = (
    Einops, Linear, Embedding, Normalize, L1Norm, SoftMax, Arithmetic, Elementwise, TypeConvert,
    Cast, GenericOperator, PairsAsComplex, Decomplex, Identity, AdditionOp, Maximum, BitwiseXor,
    Modulo, View, CovariantView, ConcatenateAxes, DeconcatenateAxes, TopK, Select, IndexSelect,
    FixedArray, Rotary, YarnRotary, BlockOperator, ParaBlockOperator, WeightedTriangularLower,
    TensorEquation,
)
"""Every operator kind; each needs one evaluation rule and one codegen rule."""

__all__ = [c.__name__ for c in ALL_OPERATORS] + ["Operator", "SelectionForm", "ALL_OPERATORS"]
