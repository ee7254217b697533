"""Every operator kind is complete: a descriptor beside its IR class (glyph, family,
validation, FLOP rule, parameter roles), a JSON decoder, a numpy rule and a torch rule.

The kinds are found, not listed: every concrete ``Operator`` subclass defined in ncdc once the
backends are imported (so an operator a rewrite introduces is counted too)."""
from __future__ import annotations

import dataclasses

import pytest
import sympy

import ncdc.codegen.rules  # noqa: F401  (registers the torch rules)
import ncdc.interpreter  # noqa: F401  (registers the numpy rules)
import ncdc.spec.loader  # noqa: F401  (registers the decoders)
from ncdc.codegen.registry import RULES as TORCH_RULES
from ncdc.interpreter.registry import RULES as NUMPY_RULES
from ncdc.ir import operators as ops
from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.operators.base import FAMILIES, Operator, missing_pieces
from ncdc.spec.builder import DECODERS

PIECES = ("glyph", "validation", "cost rule", "decoder", "numpy rule", "torch rule")

EXEMPT: dict[str, set[str]] = {
    # introduced by ir.rewrites after validation, never decoded from a spec: the two backends
    # run it, and the cost of a normalized term (what they run) counts it
    "SinkShift": {"validation", "decoder"},
}


def concrete_operators() -> list[type[Operator]]:
    out, stack = [], list(Operator.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith("ncdc.") and not cls.__name__.startswith("_"):
            out.append(cls)
    return sorted(set(out), key=lambda c: c.__name__)


def lacks(cls) -> dict[str, str]:
    """The pieces ``cls`` lacks -> what is missing, and where it goes."""
    out = {}
    gone = missing_pieces(cls)
    if any(m.startswith(("glyph", "family")) for m in gone):
        out["glyph"] = "class attributes glyph and family (beside the class, ir/operators/)"
    if "check" in gone:
        out["validation"] = "a check(self, site) method (beside the class, ir/operators/)"
    if "flops" in gone:
        out["cost rule"] = "a flops(self, b) method (beside the class, ir/operators/)"
    if cls.__name__ not in DECODERS:
        out["decoder"] = f"a decoder for __type__ {cls.__name__!r} (spec/terms_operators.py)"
    if cls not in NUMPY_RULES:
        out["numpy rule"] = "@rule(cls) in interpreter/rules/"
    if cls not in TORCH_RULES:
        out["torch rule"] = "@rule(cls) in codegen/rules/"
    return out


def test_the_operators_are_found():
    found = concrete_operators()
    assert set(ops.ALL_OPERATORS) <= set(found)
    assert {c.__name__ for c in found} - {c.__name__ for c in ops.ALL_OPERATORS} <= set(EXEMPT)
    assert len(ops.ALL_OPERATORS) >= 32  # a floor: adding a kind needs no edit here


@pytest.mark.parametrize("cls", concrete_operators(), ids=lambda c: c.__name__)
def test_every_operator_is_complete(cls):
    exempt = EXEMPT.get(cls.__name__, set())
    missing = {k: v for k, v in lacks(cls).items() if k not in exempt}
    assert not missing, f"{cls.__name__} lacks: {missing}"
    if "glyph" not in exempt:
        assert cls.family in FAMILIES
        assert cls.glyph.strip() == cls.glyph and 0 < len(cls.glyph) <= 12


def test_the_exemptions_are_needed():
    """An exemption that no longer applies is removed."""
    for name, kinds in EXEMPT.items():
        (cls,) = [c for c in concrete_operators() if c.__name__ == name]
        lacking = set(lacks(cls))
        assert kinds <= set(PIECES) and kinds <= lacking, f"{name} is exempted from {kinds - lacking} but has it"


def test_an_incomplete_operator_is_named():
    """A class that states nothing is incomplete in every descriptor entry; its ``check`` and
    ``flops`` refuse rather than pass silently."""

    @dataclasses.dataclass(frozen=True, eq=False)
    class Unstated(Operator):
        pass

    assert missing_pieces(Unstated) == ["glyph", "family", "check", "flops"]
    with pytest.raises(NotImplementedError, match="no validation rule"):
        Unstated().check(None)
    with pytest.raises(NotImplementedError, match="no FLOP rule"):
        Unstated().flops(None)

    class Drawn(Unstated):
        glyph, family = "?", "galaxy"

    assert missing_pieces(Drawn)[0].startswith("family 'galaxy'")


def test_parameter_roles_are_declared(bundled):
    """Every array an operator holds in the bundled file has a role its class declares, and
    the classes that hold arrays say so."""
    from ncdc import ir
    from ncdc.ir.params import param_roles

    seen: dict[type, set[str]] = {}
    for site in ir.walk(bundled.data):
        if isinstance(site.node, Broadcasted):
            roles = {r[0] for r in param_roles(site.node)}
            seen.setdefault(type(site.node.operator), set()).update(roles)
    for cls, roles in seen.items():
        assert roles <= set(cls.roles), cls.__name__
    assert {ops.Linear, ops.Normalize, ops.Embedding} <= {c for c, r in seen.items() if r}
    holders = {c for c in ops.ALL_OPERATORS if c.param_arrays is not Operator.param_arrays}
    assert holders == {c for c in ops.ALL_OPERATORS if c.roles}


def test_flop_rules_give_sympy(bundled):
    from ncdc import ir

    kinds = set()
    for site in ir.walk(bundled.data):
        if isinstance(site.node, Broadcasted):
            f = site.node.operator.flops(site.node)
            assert isinstance(sympy.sympify(f), sympy.Expr)
            kinds.add(type(site.node.operator))
    assert len(kinds) >= 25
