"""One IR class per operator kind, grouped by family; each class is its own descriptor
(:mod:`ir.operators.base`). A family module lists its operator classes in ``__all__``; that is
all it takes for a new class to be exported here and counted in :data:`ALL_OPERATORS`."""
from . import (
    boxes,
    contraction,
    elementwise,
    folds,
    legacy,
    normalisation,
    selection,
    sources,
    tensorlogic,
    views,
)
from .base import Operator, missing_pieces

# each family lists its classes in __all__: the star imports are this package's public names
from .boxes import *  # noqa: F403
from .contraction import *  # noqa: F403
from .elementwise import *  # noqa: F403
from .folds import *  # noqa: F403
from .legacy import *  # noqa: F403
from .normalisation import *  # noqa: F403
from .selection import *  # noqa: F403
from .sources import *  # noqa: F403
from .tensorlogic import *  # noqa: F403
from .views import *  # noqa: F403

_FAMILIES = (boxes, contraction, elementwise, folds, legacy, normalisation, selection, sources,
             tensorlogic, views)

ALL_OPERATORS: tuple[type[Operator], ...] = tuple(
    obj for fam in _FAMILIES for obj in (getattr(fam, n) for n in fam.__all__)
    if isinstance(obj, type) and issubclass(obj, Operator))
"""Every operator kind a spec can name, family by family; each is a complete descriptor and
has one decoder, one evaluation rule and one codegen rule (``tests/test_operator_coverage``)."""

_incomplete = {c.__name__: missing_pieces(c) for c in ALL_OPERATORS if missing_pieces(c)}
if _incomplete:
    raise TypeError(f"operator classes with an incomplete descriptor: {_incomplete}")

__all__ = [c.__name__ for c in ALL_OPERATORS] + ["Operator", "SelectionForm", "ALL_OPERATORS"]  # noqa: F405
