"""One small module per operator family; importing this package registers every rule in
:data:`interpreter.registry.RULES`."""
from . import (  # noqa: F401
    arithmetic,
    boxes,
    complex_pairs,
    contraction,
    convert,
    embedding,
    folds,
    legacy,
    linear,
    normalize,
    selection,
    sources,
    tensorlogic,
    views,
)
