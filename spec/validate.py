"""Validation: every problem of a loaded spec, in one pass, as :class:`~ir.errors.Diagnostic`s.

``validate(doc, binding=None)`` walks every morphism occurrence (both categories, see
:mod:`spec.checks_sites`) and runs the checks of

* :mod:`spec.checks_structure` — composition joins (``compose-mismatch``, ``product-arity``),
  rearrangement bounds, repeated blocks, ParaWrap entry counts, truncation (``truncated``);
* :mod:`spec.checks_broadcast` — weave/reindexing invariants, box ports, operator rules,
  datatype leniency (docs/format.md §2.5: a warning, never an error);
* :mod:`spec.checks_tape` — tape balance;
* :mod:`spec.checks_binding` — with a binding only: stride rows reading past an axis, unbound
  symbols.

Each diagnostic has a severity (``error`` | ``warning`` | ``info``), a stable code, the JSON
path, the chain of block titles (a block that lost its tag to truncation appears as its
inferred title with ``? (tag lost)``) and the axes involved. The codes:

==========================  ========  ======================================================
code                        severity  meaning
==========================  ========  ======================================================
``compose-mismatch``        error     ``cod(content[i]) != dom(content[i+1])`` (wire count,
                                      axes by uid, or incompatible datatypes); at ``i+1``
``product-arity``           error     the same, when a product's parts do not split the
                                      wires; or a product mixing index and array maps
``datatype-leniency``       warning   datatypes equal only after stripping quantisation
                                      (docs/format.md §2.5): box ports, TypeConvert fields, joins
``rearrangement-bounds``    error     a mapping entry outside the domain
``block-repetition``        error     a repeated block whose cod is not its dom
``parawrap-entries``        error     grab/drop entries vs the body's operands/results
``scan-state``              error     a Scan's base or step gives another state than its
                                      step takes (:mod:`spec.checks_scan`); a warning when
                                      only the axes' uids differ (same sizes and datatype)
``scan-steps``              error     a Scan's literal step count is not its axis's length
``weave-degree``            error     TILED slot counts vs the degree / a reindexing's cod;
                                      one reindexing per input
``reindexing-domain``       error     reindexings not sharing one domain (or not index maps)
``backup-degree``           error     backup_degree given with inputs (warning: missing
                                      without inputs, the degree is then ``()``)
``box-arity``, ``box-port`` error     a box's weaves vs its block's dom/cod
``operator-arity``          error     operand/result counts (Einops signature length, ...)
``operator-rank``           error     target ranks (one axis for L1Norm/Maximum/BitwiseXor,
                                      all TILED for Arithmetic, Einops entry lengths, ...)
``operator-type``           error     datatype kinds (Embedding index natural, ...)
``einops-group``            error     one Einops group over axes of provably different sizes
``unknown-elementwise``     warning   an older-generation function no evaluator knows
``tape-unbalanced``         warning   a Grab of a slot no earlier Drop wrote
``truncated``               warning   a block cut by truncation (info: any other cut term)
``size-invalid``            error     a size, repetition, stride or natural bound that is not
                                      an int64 integer in range, or an array beyond int64
                                      elements (literals always; symbols once bound); see
                                      :mod:`spec.checks_sizes`
``stride-out-of-range``     warning   (with a binding) see :mod:`spec.checks_binding`
``unbound-symbol``          warning   (with a binding) a size ``data`` uses has no value
                                      (info: only the repository uses it)
``constants-defaulted``     warning   (with a binding) constants only the constants file binds
``name-invalid``            error     a name, title or label holding a lone surrogate (no
                                      character; see :mod:`spec.checks_names`)
``constant-invalid``        error     an Iverson literal outside int64, a formula constant
                                      float64 cannot hold (complex, beyond 1.8e308); see
                                      :mod:`spec.checks_constants`
``type-error``              error     any other typing failure (``SpecTypeError``)
``too-deep``                error     nesting beyond Python's recursion limit
==========================  ========  ======================================================

Validation raises nothing for a spec the loader accepted: a typing exception
(``SpecTypeError``, or any other ``SpecError`` a term raises) becomes a ``type-error``
diagnostic and nesting too deep for Python a ``too-deep`` one. Every other condition is checked
before it could fail (each check states what it needs of its site), so no exception of another
type is caught: one escaping is a bug in ncdc.
Joins next to a truncated term are skipped. Output order is the traversal order (pre-order),
so it is deterministic.
"""
from __future__ import annotations

import gc

from ncdc.ir.arrays import Array
from ncdc.ir.axes import Axis
from ncdc.ir.errors import Diagnostic, SpecError, SpecTypeError, TruncatedError
from ncdc.ir.morphisms import (
    Block,
    Broadcasted,
    Composed,
    CoupledScan,
    Morphism,
    ParaWrap,
    ProductOfMorphisms,
    Rearrangement,
    Scan,
    StrideMorphism,
    Truncated,
)
from ncdc.ir.operators import ConcatenateAxes, CovariantView
from ncdc.ir.walk import by_kind

from .checks_binding import check_stride_rows, check_unbound
from .checks_broadcast import check_broadcasted
from .checks_constants import check_constants
from .checks_names import check_names
from .checks_scan import check_coupled_scan, check_scan
from .checks_sites import all_sites, held_index_maps
from .checks_sizes import check_sizes
from .checks_structure import (
    check_block,
    check_composed,
    check_parawrap,
    check_product,
    check_rearrangement,
    check_truncated,
)
from .checks_tape import check_tape
from .summary import cut_blocks

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


class Checker:
    """Collects diagnostics; gives the checks safe typing (``typed``) and the environment."""

    def __init__(self, binding=None, cuts: dict | None = None):
        self.binding = binding
        self.cuts = cuts or {}
        self.env = binding.env if binding is not None else None
        self.out: list[Diagnostic] = []
        self._typing_failed: set[int] = set()
        self._malformed: set[int] = set()
        self._typed: dict[str, dict[int, tuple]] = {"dom": {}, "cod": {}}
        """``typed``'s answers by attr and node id, with the node (kept alive: ids stay
        unique): many checks ask for the same node's dom/cod, and the answer depends only
        on the node."""

    def add(self, severity: str, code: str, message: str, path: str = "", titles=(),
            axes=()) -> None:
        self.out.append(Diagnostic(severity, code, message, path, self.name_cut(path, titles),
                                   tuple(axes)))

    def name_cut(self, path: str, titles) -> tuple[str, ...]:
        """The title chain with each "(truncated block)" replaced by its inferred title."""
        titles = tuple(titles)
        if "(truncated block)" not in titles or not self.cuts:
            return titles
        names = [c.inferred_title or c.title for p, c in sorted(self.cuts.items(),
                                                                  key=lambda kv: len(kv[0]))
                 if path == p or path.startswith((p + ".", p + "["))]
        out, it = [], iter(names)
        for t in titles:
            if t == "(truncated block)":
                name = next(it, None)
                t = f"{name}? (tag lost)" if name else t
            out.append(t)
        return tuple(out)

    def error(self, code, message, path="", titles=(), axes=()):
        self.add("error", code, message, path, titles, axes)

    def warning(self, code, message, path="", titles=(), axes=()):
        self.add("warning", code, message, path, titles, axes)

    def info(self, code, message, path="", titles=(), axes=()):
        self.add("info", code, message, path, titles, axes)

    def typed(self, node: Morphism, attr: str):
        """``node.dom`` / ``node.cod``, or None when it cannot be computed (cut off, ill-typed:
        reported where the problem is) or holds an array whose shape has an entry that is not
        an axis (a ``type-error`` here, once per term: no comparison of shapes applies).
        Asked again, it answers from a memo (not after a ``RecursionError``: that depends on
        the depth of the asking)."""
        memo = self._typed.get(attr)
        if memo is None:
            memo = self._typed[attr] = {}
        hit = memo.get(id(node))
        if hit is not None:
            return hit[1]
        out = self._typed_once(node, attr)
        if out is not _RECURSED:
            memo[id(node)] = (node, out)
            return out
        return None

    def _typed_once(self, node: Morphism, attr: str):
        try:
            objs = tuple(getattr(node, attr))
        except TruncatedError:
            return None
        except SpecTypeError:
            self._typing_failed.add(id(node))
            return None
        except RecursionError:
            return _RECURSED
        except SpecError:
            return None
        bad = _malformed_array(objs)
        if bad is None:
            return objs
        if id(node) not in self._malformed:
            self._malformed.add(id(node))
            kinds = sorted({type(a).__name__ for a in bad.shape if not isinstance(a, Axis)})
            self.error("type-error", f"its {attr} holds an array whose shape has entries that "
                       f"are not axes ({', '.join(kinds)})", getattr(node, "path", ""))
        return None


def _malformed_array(objs):
    """The first array of ``objs`` whose shape has an entry that is not an axis, else None.
    (Loops, not generators: this runs for every dom and cod.)"""
    for o in objs:
        if isinstance(o, Array):
            for a in o.shape:
                if not isinstance(a, Axis):
                    return o
    return None


_RECURSED = object()  # Checker._typed_once: nesting too deep to type, at this depth


def _run(ck: Checker, fn, *args, path: str = "", titles=()) -> None:
    """Run one check; what it raises becomes a diagnostic."""
    try:
        fn(ck, *args)
    except TruncatedError:
        pass
    except SpecTypeError as exc:
        ck.error("type-error", exc.message, exc.json_path or path, exc.titles or titles)
    except SpecError as exc:
        ck.error("type-error", exc.message, exc.json_path or path, exc.titles or titles)
    except RecursionError:
        ck.error("too-deep", "terms nested too deeply to check", path, titles)


def _plain(check):
    """A check of one site that needs neither the cut blocks nor the written maps."""
    return lambda ck, node, path, titles, cuts, writes: check(ck, node, path, titles)


def _truncated(ck, node: Truncated, path, titles, cuts: dict, writes) -> None:
    check_truncated(ck, node, path, titles, cuts.get(path))


def _stride_rows(ck, node: StrideMorphism, path, titles, cuts, writes: set) -> None:
    if ck.env is not None:
        check_stride_rows(ck, node, path, titles, path in writes)


_SITE_CHECKS = {
    Truncated: _truncated, Composed: _plain(check_composed),
    ProductOfMorphisms: _plain(check_product), Rearrangement: _plain(check_rearrangement),
    Block: _plain(check_block), Broadcasted: _plain(check_broadcasted),
    ParaWrap: _plain(check_parawrap), StrideMorphism: _stride_rows, Scan: _plain(check_scan),
    CoupledScan: _plain(check_coupled_scan),
}
"""The check of each kind of site (by class, :func:`ir.walk.by_kind`)."""


def _check_site(ck: Checker, s, cuts: dict, writes: set) -> None:
    check = by_kind(_SITE_CHECKS, s.node)
    if check is not None:
        _run(ck, check, s.node, s.path, s.titles, cuts, writes, path=s.path, titles=s.titles)


def _written_maps(b: Broadcasted, path: str) -> list[str]:
    """Paths of the index maps ``b``'s operator writes through (scatters), not reads."""
    if isinstance(b.operator, (CovariantView, ConcatenateAxes)):
        return [p for p, _ in held_index_maps(b, path) if ".operator." in p]
    return []


def validate(doc, binding=None) -> list[Diagnostic]:
    """Every problem of ``doc`` (a loaded :class:`~spec.loader.Document`, or any morphism),
    in one pass. ``binding`` (a :class:`~spec.bindings.Binding`) enables the checks that need
    sizes: stride rows past an axis, unbound symbols.

    The cyclic garbage collector is paused while checking (as while loading): the checks
    allocate many small acyclic objects next to a freshly loaded term."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return _validate(doc, binding)
    finally:
        if paused:
            gc.enable()


def _validate(doc, binding) -> list[Diagnostic]:
    root = doc if isinstance(doc, Morphism) else doc.data
    sites, cuts, problem = [], {}, None
    try:
        sites = list(all_sites(root))
    except (SpecError, RecursionError) as exc:
        problem = exc
    if not isinstance(doc, Morphism) and sites:
        try:
            cuts = {c.path: c for c in cut_blocks(doc, root, sites)}
        except (SpecError, RecursionError):
            cuts = {}
    ck = Checker(binding, cuts)
    if problem is not None:
        ck.error("too-deep", f"cannot traverse the spec: {problem}", getattr(root, "path", ""))
    writes: set[str] = set()
    for s in sites:
        if isinstance(s.node, Broadcasted):
            writes.update(_written_maps(s.node, s.path))
        _check_site(ck, s, cuts, writes)
    _run(ck, check_tape, root, path=getattr(root, "path", ""))
    _run(ck, check_names, doc, sites, path=getattr(root, "path", ""))
    _run(ck, check_sizes, sites, binding, path=getattr(root, "path", ""))
    _run(ck, check_constants, sites, path=getattr(root, "path", ""))
    if binding is not None:
        _run(ck, check_unbound, sites, list(binding.unbound))
        _run(ck, check_defaulted_constants, sites, binding)
    return ck.out


def check_defaulted_constants(ck, sites, binding) -> None:
    """One warning listing the constants the spec uses that neither the diagram, the preset
    nor the user binds: they hold the constants file's defaults (``presets/constants.json``)."""
    from .checks_binding import symbol_uses

    used = symbol_uses(sites)
    left = sorted((s for s, origin in binding.sources.items()
                   if origin.startswith("constants file") and s in used),
                  key=lambda s: (s.label, s.uid))
    if left:
        values = binding.env.values
        ck.warning("constants-defaulted",
                   f"{len(left)} constant(s) bound by neither the diagram nor the preset hold "
                   "the constants file's defaults: "
                   + ", ".join(f"{s.label} = {float(values[s]):g}" for s in left)
                   + "; the released preset carries the released values (or give --constant "
                     "NAME=X, or --config config.json)", "", (), tuple(s.label for s in left))


def counts(diagnostics) -> dict[str, int]:
    """Number of diagnostics by severity, in severity order (for summaries)."""
    out = {"error": 0, "warning": 0, "info": 0}
    for d in diagnostics:
        out[d.severity] = out.get(d.severity, 0) + 1
    return out


def counts_by_code(diagnostics) -> dict[str, int]:
    """Number of diagnostics per ``severity:code``, sorted."""
    out: dict[str, int] = {}
    for d in diagnostics:
        key = f"{d.severity}:{d.code}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (SEVERITY_ORDER.get(kv[0].split(":")[0], 9),
                                                    kv[0])))


__all__ = ["Checker", "counts", "counts_by_code", "validate"]
