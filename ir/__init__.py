"""The typed intermediate representation of a pyncd diagram.

Immutable classes, one per node kind; sizes are sympy expressions over :class:`FreeNumeric`
symbols, bound late. Nothing here knows about JSON, numpy or torch.
"""
from .arrays import TILED, Array, ProdObject, Weave, WeaveMode
from .axes import AffineSparseAxis, Axis, ConcatenatedAxis, RawAxis, SparseAxis
from .datatypes import (
                        BlockScale,
                        Complex,
                        Datatype,
                        Encoding,
                        Natural,
                        Quantified,
                        Reals,
                        compatible,
                        kind,
                        storage_encoding,
                        strip,
)
from .errors import (
                        BindingError,
                        Diagnostic,
                        EvaluationError,
                        SpecDecodeError,
                        SpecError,
                        SpecFormatError,
                        SpecTypeError,
                        TruncatedError,
)
from .morphisms import (
                        Block,
                        Broadcasted,
                        Composed,
                        CoupledScan,
                        Drop,
                        Grab,
                        Morphism,
                        ParaWrap,
                        ProductOfMorphisms,
                        Rearrangement,
                        Scan,
                        StrideMorphism,
                        StrideRow,
                        Truncated,
)
from .names import Name, plain_title
from .numeric import FREE_INPUT, Ceiling, FreeNumeric, IsPositive, Sigmoid, free_symbols
from .operators import *  # noqa: F403 -- ncdc.ir re-exports every operator class by name
from .operators import ALL_OPERATORS, Operator, SelectionForm
from .tags import BlockDrawing, BlockTag, CodeReference, TapeSlot
from .walk import Site, blocks, walk

__all__ = [
    "TILED", "Array", "ProdObject", "Weave", "WeaveMode", "AffineSparseAxis", "Axis",
    "ConcatenatedAxis", "RawAxis", "SparseAxis", "BlockScale", "Complex", "Datatype", "Encoding",
    "Natural", "Quantified", "Reals", "compatible", "kind", "storage_encoding", "strip",
    "BindingError", "Diagnostic", "EvaluationError", "SpecDecodeError", "SpecError",
    "SpecFormatError", "SpecTypeError", "TruncatedError", "Block", "Broadcasted", "Composed", "CoupledScan",
    "Drop", "Grab", "Morphism", "ParaWrap", "ProductOfMorphisms", "Rearrangement", "Scan",
    "StrideMorphism", "StrideRow", "Truncated", "Name", "plain_title", "FREE_INPUT", "Ceiling",
    "FreeNumeric", "IsPositive", "Sigmoid", "free_symbols", "ALL_OPERATORS",
    "Operator", "SelectionForm", "BlockDrawing", "BlockTag", "CodeReference", "TapeSlot", "Site",
    "blocks", "walk",
] + [c.__name__ for c in ALL_OPERATORS]
