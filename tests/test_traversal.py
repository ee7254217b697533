"""The one wire-threading traversal (ir/traverse.py) on hand-built IR, and the count of
functions that still branch on many morphism kinds themselves.

Wire values are strings: an operator named ``f`` turns its inputs into ``"f(a, b)"``, so each
expected result below is written by hand from the semantics of the structure, not computed."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import sympy

from ncdc.ir import (
    Arithmetic,
    Array,
    Block,
    BlockOperator,
    BlockTag,
    Composed,
    Drop,
    Grab,
    ParaBlockOperator,
    ParaWrap,
    ProductOfMorphisms,
    Rearrangement,
    TapeSlot,
)
from ncdc.ir.errors import SpecTypeError, TruncatedError
from ncdc.ir.morphisms import ThreadedComposed, Truncated
from ncdc.ir.names import Name
from ncdc.ir.params import param_roles, param_specs
from ncdc.ir.traverse import Descend, Visitor, traverse
from ncdc.ir.walk import arity, by_kind
from tests.oracles.ir_build import R, axis, bc, rearr, stride, weave

ROOT = Path(__file__).resolve().parents[1]
X = axis("x", 2)
ARR = Array(R, (X,))


def op(name: str, n_in: int = 1, n_out: int = 1):
    """A Broadcasted named ``name`` with ``n_in`` inputs and ``n_out`` outputs over ``x``."""
    return bc(Arithmetic(Name(name)), [weave(R, "*")] * n_in, [weave(R, "*")] * n_out,
              [rearr([0], X)] * n_in)


def wires(mapping, n: int) -> Rearrangement:
    return Rearrangement(tuple(mapping), (ARR,) * n)


def block(body, title: str, repetition: int = 1) -> Block:
    return Block(body, BlockTag(hash(title) % 10**6, None, sympy.Integer(repetition), title))


class Strings(Visitor):
    """Values are strings; every hook call is logged with its scope."""

    def __init__(self):
        self.tape: dict[int, str] = {}
        self.log: list = []

    def operator(self, node, ins, scope):
        name = node.operator.label
        self.log.append(("op", name, scope.path, scope.titles, scope.keys))
        text = f"{name}({', '.join(ins)})"
        n = len(node.output_weaves)
        return [text] if n == 1 else [f"{text}[{j}]" for j in range(n)]

    def grab(self, slot, array, scope):
        self.log.append(("grab", slot.label, scope.path))
        return self.tape.get(slot.uid, f"<{slot.label}>")

    def drop(self, slot, value, array, scope):
        self.log.append(("drop", slot.label, scope.path))
        self.tape[slot.uid] = value

    def enter_block(self, blk, ins, scope):
        self.log.append(("enter", blk.title, tuple(ins), scope.keys))

    def leave_block(self, blk, outs, scope):
        self.log.append(("leave", blk.title, tuple(outs), scope.keys))


def run(m, *ins):
    v = Strings()
    return traverse(m, list(ins), v, "data"), v


def test_composition_product_and_rearrangement():
    m = Composed((ProductOfMorphisms((op("f"), op("g"))), wires([1, 0, 1], 2), op("h", 3)))
    out, v = run(m, "a", "b")
    assert out == ["h(g(b), f(a), g(b))"]
    assert [e[2] for e in v.log] == ["data.content[0].content[0]", "data.content[0].content[1]",
                                     "data.content[2]"]


def test_product_splits_by_each_parts_arity():
    m = ProductOfMorphisms((op("f", 2), wires([], 1), op("g", 1, 2)))
    out, _ = run(m, "a", "b", "c", "d")
    assert out == ["f(a, b)", "g(d)[0]", "g(d)[1]"]


def test_block_repeats_with_per_iteration_keys_and_hooks():
    loop = block(op("f"), "Loop", 3)
    m = Composed((block(op("p"), "B"), loop, block(op("q"), "B")))
    out, v = run(m, "a")
    assert out == ["q(f(f(f(p(a)))))"]
    ops = [(e[1], e[3], e[4]) for e in v.log if e[0] == "op"]
    assert ops == [("p", ("B",), ("B",)),
                   ("f", ("Loop",), ("Loop@0",)), ("f", ("Loop",), ("Loop@1",)),
                   ("f", ("Loop",), ("Loop@2",)),
                   ("q", ("B",), ("B~1",))]          # a repeated sibling title gets ~1
    hooks = [e for e in v.log if e[0] in ("enter", "leave") and e[1] == "Loop"]
    assert hooks == [("enter", "Loop", ("p(a)",), ("Loop",)),
                     ("leave", "Loop", ("f(f(f(p(a))))",), ("Loop",))]


def test_parawrap_grabs_before_and_drops_after_its_body():
    s1, s2 = TapeSlot(1, Name("s1")), TapeSlot(2, Name("s2"))
    wrap = ParaWrap(ProductOfMorphisms((op("f"), op("g"))), (s1, None), (None, s2))
    m = Composed((ProductOfMorphisms((Drop(s1, ARR), wires([0], 1))), wrap,
                  ProductOfMorphisms((wires([0], 1), Grab(s2, ARR)))))
    out, v = run(m, "a", "b")
    assert out == ["f(a)", "g(b)"]
    assert [e for e in v.log if e[0] in ("grab", "drop")] == [
        ("drop", "s1", "data.content[0].content[0]"),
        ("grab", "s1", "data.content[1].grabs[0]"),
        ("drop", "s2", "data.content[1].drops[1]"),
        ("grab", "s2", "data.content[2].content[1]")]


def test_threaded_composition_follows_its_routing_at_the_steps_paths():
    steps = (op("f"), op("h", 2))
    m = ThreadedComposed.build(steps, ((0,), (2, 1)), 2)
    out, v = run(m, "a", "b")
    assert out == ["h(f(a), b)"]
    assert [e[2] for e in v.log] == ["data.content[0]", "data.content[1]"]


def test_a_box_runs_its_block_in_place_by_default():
    inner = block(op("f"), "Inner")
    box = bc(BlockOperator(Name("box"), block=inner), [weave(R, "*")], [weave(R, "*")],
             [rearr([0], X)])
    out, v = run(Composed((box, op("g"))), "a")
    assert out == ["g(f(a))"]
    assert v.log[1][:3] == ("op", "f", "data.content[0].operator.block.body")


def test_a_para_box_drops_its_grab_ports_first_and_grabs_its_drop_ports_last():
    s1, s2 = TapeSlot(1, Name("s1")), TapeSlot(2, Name("s2"))
    body = block(ParaWrap(op("f", 2, 2), (s1, None), (None, s2)), "Seeded")
    para = ParaBlockOperator(Name("para"), block=body, grabs=(Grab(s1, ARR),),
                             drops=(Drop(s2, ARR),))
    box = bc(para, [weave(R, "*")] * 2, [weave(R, "*")] * 2, [rearr([0], X)] * 2)
    out, v = run(box, "seed", "a")
    assert out == ["f(seed, a)[0]", "f(seed, a)[1]"]
    assert [e for e in v.log if e[0] in ("grab", "drop")] == [
        ("drop", "s1", "data.operator.grabs[0]"),
        ("grab", "s1", "data.operator.block.body.grabs[0]"),
        ("drop", "s2", "data.operator.block.body.drops[1]"),
        ("grab", "s2", "data.operator.drops[0]")]


def test_a_hook_may_descend_into_morphisms_of_its_choice():
    class Cut(Strings):
        def truncated(self, node, ins, scope):
            return Descend(((".content[0]", node.partial["content"][0]),), ins,
                           title="(cut)", then=lambda outs: outs + ["lost"])

    t = Truncated("Composed", {"content": (op("f"),)}, "end of file")
    v = Cut()
    assert traverse(t, ["a"], v, "data") == ["f(a)", "lost"]
    assert v.log[0][2:4] == ("data.content[0]", ("(cut)",))


def test_a_then_may_continue_with_a_further_descend():
    class Twice(Strings):
        def truncated(self, node, ins, scope):
            first = node.partial["content"][0]
            return Descend(((".content[0]", first),), ins,
                           then=lambda outs: Descend(((".content[0]", first),), outs))

    t = Truncated("Composed", {"content": (op("f"),)}, "end of file")
    assert traverse(t, ["a"], Twice(), "data") == ["f(f(a))"]


def test_split_sees_a_products_values_before_its_parts():
    class Split(Strings):
        def split(self, node, ins, scope):
            self.log.append(("split", len(node.content), tuple(ins), scope.path))

    v = Split()
    m = Composed((op("p"), wires([0, 0], 1), ProductOfMorphisms((op("f"), op("g")))))
    assert traverse(m, ["a"], v, "data") == ["f(p(a))", "g(p(a))"]
    assert [e[0] for e in v.log] == ["op", "split", "op", "op"]
    assert v.log[1] == ("split", 2, ("p(a)", "p(a)"), "data.content[2]")


def test_segs_give_a_part_the_segments_of_its_level():
    """A block traversed alone keys by its title; given its level's segments (the second
    of two siblings titled B: ``B~1``), by its segment."""
    first, second = block(op("p"), "B"), block(op("q"), "B")
    _, whole = run(Composed((first, second)), "a")
    assert [e[4] for e in whole.log if e[0] == "op"] == [("B",), ("B~1",)]
    _, alone = run(second, "x")
    assert [e[4] for e in alone.log if e[0] == "op"] == [("B",)]
    v = Strings()
    traverse(second, ["x"], v, "data", segs={id(second): "B~1"})
    assert [e[4] for e in v.log if e[0] == "op"] == [("B~1",)]


def test_cut_terms_and_index_maps_are_typed_errors():
    t = Truncated("Composed", {}, "end of file")
    with pytest.raises(TruncatedError):
        run(Composed((op("f"), t)), "a")
    with pytest.raises(SpecTypeError, match="index map"):
        run(stride([X], [(X, [1], 0)]), "a")
    with pytest.raises(SpecTypeError, match="reads past"):
        run(wires([3], 1), "a")


def test_ten_thousand_nested_compositions_never_recurse():
    m = op("f")
    for i in range(10_000):
        m = Composed((m,)) if i % 3 else block(Composed((m,)), f"level {i % 7}")
    out, v = run(m, "a")
    assert out == ["f(a)"]
    assert sum(e[0] == "enter" for e in v.log) == sum(e[0] == "leave" for e in v.log) == 3334
    (f,) = [e for e in v.log if e[0] == "op"]
    assert len(f[3]) == 3334 and f[3][:2] == ("level 3", "level 0")  # outermost first


class _Keys(Visitor):
    """Records the parameter-key scope of each operator that has parameters."""

    def __init__(self):
        self.seen = []

    def operator(self, node, ins, scope):
        if param_roles(node):
            self.seen.append((id(node), scope.keys))
        return [None] * len(node.output_weaves)

    def rearrange(self, node, ins, scope):
        return [None] * len(node.mapping)

    def grab(self, slot, array, scope):
        return None

    def drop(self, slot, value, array, scope):
        pass

    def truncated(self, node, ins, scope):
        return Descend(node.children(), ins, then=lambda _: [])


@pytest.mark.parametrize("which", ["bundled", "transformer"])
def test_keys_are_the_parameter_keys_of_ir_params(which, request):
    """The scope's keys are the title part of :func:`ir.params.param_specs`' keys."""
    root = request.getfixturevalue(which).data
    want = []
    for spec in param_specs(root):
        if not want or want[-1] != (id(spec.site), spec.titles):
            want.append((id(spec.site), spec.titles))
    v = _Keys()
    traverse(root, [None] * arity(root), v)
    assert len(want) > 20 and v.seen == want


def test_the_docstring_example_names_each_outputs_producer(attention_core):
    import textwrap

    from ncdc.ir import traverse as module

    code = textwrap.dedent(module.__doc__.split("::\n", 1)[1])
    scope = {"root": attention_core.data}
    exec(compile(code, "ir/traverse.py docstring", "exec"), scope)  # noqa: S102
    assert scope["outs"] == [("data.body.content[1]", 0)]  # the second Einops (test_cli_inspect)


def test_by_kind_finds_the_most_derived_entry():
    table = {Composed: "composed", Block: "block"}
    threaded = ThreadedComposed.build((op("f"),), ((0,),), 1)
    assert by_kind(table, threaded) == "composed"
    assert by_kind({**table, ThreadedComposed: "threaded"}, threaded) == "threaded"
    assert by_kind(table, op("f"), "none") == "none"


# --------------------------------------------------------------------- the walks that remain

KINDS = {"Composed", "ThreadedComposed", "ProductOfMorphisms", "Rearrangement", "Block",
         "Broadcasted", "ParaWrap", "Grab", "Drop", "Truncated", "StrideMorphism"}
MAX_MANY_KIND_FUNCTIONS = 4
"""Functions outside tests that branch themselves (``isinstance`` / ``match``) on five or more
morphism kinds, instead of using :func:`ir.traverse.traverse` or :func:`ir.walk.by_kind`. The
interpreter, the view and codegen's lowering use them; the four left are codegen's per-site
checks inside an :func:`ir.walk.walk` (chunks, flips, complex parts). Lower this as they adopt
it."""


def _kinds_named(node) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
            if (isinstance(n, ast.Name) and n.id in KINDS)
            or (isinstance(n, ast.Attribute) and n.attr in KINDS)}


def _branch_kinds(fn) -> set[str]:
    """Kinds named in the isinstance tests and match class patterns of ``fn``'s own body
    (nested functions and classes are counted on their own)."""
    kinds, stack = set(), list(fn.body)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                and n.func.id == "isinstance" and len(n.args) == 2):
            kinds |= _kinds_named(n.args[1])
        elif isinstance(n, ast.MatchClass):
            kinds |= _kinds_named(n.cls)
        stack.extend(ast.iter_child_nodes(n))
    return kinds


def many_kind_functions(root: Path = ROOT, at_least: int = 5) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in ("tests", "build") or any(p.startswith(".") for p in rel.parts):
            continue
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                kinds = _branch_kinds(fn)
                if len(kinds) >= at_least:
                    out.append(f"{rel}:{fn.lineno} {fn.name} ({len(kinds)}: "
                               f"{', '.join(sorted(kinds))})")
    return out


def test_the_scan_sees_an_isinstance_chain():
    src = ("def f(m):\n    if isinstance(m, (Composed, Block)): pass\n"
           "    elif isinstance(m, ir.ParaWrap): pass\n"
           "    match m:\n        case Grab(): pass\n        case Drop(): pass\n")
    (fn,) = ast.parse(src).body
    assert _branch_kinds(fn) == {"Composed", "Block", "ParaWrap", "Grab", "Drop"}


def test_few_functions_branch_on_many_morphism_kinds():
    found = many_kind_functions()
    listing = "\n".join(found)
    assert len(found) <= MAX_MANY_KIND_FUNCTIONS, (
        f"{len(found)} functions branch on >= 5 morphism kinds (at most "
        f"{MAX_MANY_KIND_FUNCTIONS}); use ir.traverse / ir.walk.by_kind:\n{listing}")
    assert "ir/traverse.py" not in listing
