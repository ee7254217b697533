"""Checks of ``Broadcasted`` terms: the weave/reindexing invariants of docs/format.md §9.4, then
the operator's own arity, rank and datatype rules (§11), which each operator class states
(``check``, beside the class in ``ir/operators/``; the vocabulary is :mod:`ir.operators.site`).

Codes here: ``weave-degree`` (TILED slot counts, one reindexing per input),
``reindexing-domain`` (reindexings that do not share one domain of axes), ``backup-degree``
(present with inputs / absent without). The operators' rules add ``operator-arity``,
``operator-rank``, ``operator-type``, ``einops-group``, ``box-arity`` / ``box-port``,
``datatype-leniency`` and ``unknown-elementwise``.
"""
from __future__ import annotations

from ncdc.ir.axes import Axis
from ncdc.ir.morphisms import Broadcasted, Morphism
from ncdc.ir.operators.site import Site
from ncdc.ir.shapes import axis_labels, objects_text


def check_broadcasted(ck, b: Broadcasted, path: str, titles) -> None:
    ins, outs, rxs = b.input_weaves, b.output_weaves, b.reindexings
    if len(rxs) != len(ins):
        ck.error("weave-degree", f"{len(ins)} input weave(s) but {len(rxs)} reindexing(s); one "
                 "reindexing per input", path + ".reindexings", titles)
    doms = []
    for k, rx in enumerate(rxs):
        if not isinstance(rx, Morphism):
            continue
        dom, cod = ck.typed(rx, "dom"), ck.typed(rx, "cod")
        if dom is None or cod is None:
            continue
        if not all(isinstance(a, Axis) for a in dom + cod):
            ck.error("reindexing-domain", f"reindexing {k} maps arrays, not axes: "
                     f"{objects_text(dom)} -> {objects_text(cod)}", f"{path}.reindexings[{k}]",
                     titles)
            continue
        doms.append((k, dom))
        if k < len(ins) and ins[k].tiled_count != len(cod):
            ck.error("weave-degree", f"input {k}: the weave {ins[k]} has {ins[k].tiled_count} "
                     f"TILED slot(s) but its reindexing gives {len(cod)} axis/axes "
                     f"{objects_text(cod)}", f"{path}.input_weaves[{k}]", titles,
                     axis_labels(cod))
    if doms:
        k0, d0 = doms[0]
        for k, d in doms[1:]:
            if tuple(a.uid for a in d) != tuple(a.uid for a in d0):
                ck.error("reindexing-domain", f"reindexing {k} has domain {objects_text(d)} but "
                         f"reindexing {k0} has {objects_text(d0)}; all share the degree",
                         f"{path}.reindexings[{k}]", titles, axis_labels(d + d0))
    if ins and b.backup_degree is not None:
        ck.error("backup-degree", "backup_degree must be null when there are inputs",
                 path + ".backup_degree", titles)
    if not ins and b.backup_degree is None:
        ck.warning("backup-degree", "no inputs and no backup_degree: the degree is taken as ()",
                   path, titles)
    degree = doms[0][1] if doms else tuple(b.backup_degree or ())
    for j, w in enumerate(outs):
        if w.tiled_count != len(degree):
            ck.error("weave-degree", f"output {j}: the weave {w} has {w.tiled_count} TILED "
                     f"slot(s) but the degree {objects_text(degree)} has {len(degree)}",
                     f"{path}.output_weaves[{j}]", titles, axis_labels(degree))
    check_operator(ck, b, path, titles)


# --------------------------------------------------------------------------- operators


def check_operator(ck, b: Broadcasted, path: str, titles) -> None:
    """The operator's own rules (its class's ``check``, beside the IR class in
    ``ir/operators/``); every operator kind states one."""
    b.operator.check(Site(ck, b, path, titles))


__all__ = ["check_broadcasted", "check_operator"]
