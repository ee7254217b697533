"""The report of ``ncdc cost``: what the model (or a block) costs, per block and in total, as formulas in the
sizes and as numbers at the binding: learned elements, elements activated per token, weight
bytes at a storage format (float32, bfloat16, mxfp8, mxfp4), FLOPs per token, the largest array
one call materialises, and the state a decoder keeps (look-back windows). The counting rules are
stated in ``ir/cost.py``, ``ir/cost_rules.py`` (FLOPs) and ``ir/weight_formats.py`` (bytes). Each block's figures are for one call of that block; "per token"
divides by the token count of its domain (a block that runs per token is its own call).
"""
from __future__ import annotations

import sympy

from ncdc.commands.common import emit_json, load_spec, parse_assignments
from ncdc.commands.show import note_unbound
from ncdc.interpreter.storage_policy import StoragePolicy
from ncdc.ir.axes import is_token_axis
from ncdc.ir.cost import FORMATS, block_costs, domain, with_tokens
from ncdc.ir.errors import BindingError
from ncdc.ir.incremental import analyse
from ncdc.ir.morphisms import Block
from ncdc.ir.tags import BlockDrawing
from ncdc.ir.walk import walk
from ncdc.spec.bindings import match


def _repetition(rep):
    """A repetition count: an int when it is a number, else its formula (docs/json.md)."""
    return int(rep) if getattr(rep, "is_Integer", False) else sympy.sstr(rep)


def token_axis(spec, root):
    """The token axis of ``root``'s domain, else of the model's (a per-token block has none)."""
    for node in (root, spec.data):
        for arr in domain(node):
            for a in getattr(arr, "shape", ()):
                if is_token_axis(a):
                    return a
    raise BindingError("--tokens: this spec has no token axis (an axis whose code_form is "
                       "'tokens'); bind its sizes with --size")


def _solve_tokens(axis, env, tokens: int, given: set):
    """The binding of one size symbol of ``axis.size`` that makes it ``tokens``: the one not
    given with ``--size``, preferring a size the spec states no released value for (``b`` in
    ``x = a*b``); the others keep their values."""
    free = sorted((s for s in axis.size.free_symbols if s not in given), key=lambda s: s.uid)
    open_ = [s for s in free if getattr(s, "default", None) is None]
    pick = open_ if len(open_) == 1 else free
    if len(pick) != 1:
        names = ", ".join(s.label for s in free) or "none"
        raise BindingError(f"--tokens {tokens}: cannot tell which size of the token axis "
                           f"{axis.label} = {sympy.sstr(axis.size)} to solve for (candidates: "
                           f"{names}); give the others with --size")
    target = pick[0]
    rest = env.subs(axis.size.xreplace({target: sympy.Dummy("t")}))
    expr = rest.xreplace({d: target for d in rest.atoms(sympy.Dummy)})
    if expr.free_symbols - {target}:
        raise BindingError(f"--tokens {tokens}: the token axis size {sympy.sstr(expr)} has "
                           "other unbound sizes; give them with --size")
    sol = sympy.solve(sympy.Eq(expr, tokens), target)
    ok = [v for v in sol if v.is_Integer and v > 0]
    if not ok:
        raise BindingError(f"--tokens {tokens}: {axis.label} = {sympy.sstr(axis.size)} cannot "
                           f"be {tokens} with a positive integer {target.label} (solution: "
                           f"{', '.join(sympy.sstr(v) for v in sol) or 'none'})")
    return {target: int(ok[0])}


def _value(expr, env):
    """An int or float at the binding, or the formula text where a size is unbound."""
    val = env.subs(expr)
    if val.free_symbols:
        return sympy.sstr(sympy.N(sympy.expand(val), 6))
    if val.is_Integer:
        return int(val)
    if val.is_real is not True:     # a complex or undecidable size (a hostile spec): as text
        return sympy.sstr(val)
    return float(val)


def _rank(expr, env) -> float:
    """A number to compare sizes by: unbound symbols count 1."""
    val = env.subs(expr)
    if val.free_symbols:
        val = val.xreplace({s: 1 for s in val.free_symbols})
    try:
        return float(val)
    except (TypeError, ValueError):
        return 0.0


def summarise(c, env, fmt: str, formulas: bool = True) -> dict:
    """Every figure of a cost at the binding: values, and formulas unless ``formulas`` is
    False (printing large formulas is the slow part)."""

    def _quantity(expr) -> dict:
        out = {"value": _value(expr, env)}
        if formulas:
            out["formula"] = sympy.sstr(sympy.expand(expr))
        return out

    largest = max(c.arrays, key=lambda a: _rank(a.bytes, env), default=None)
    state_bytes = sum((s.bytes for s in c.state), sympy.Integer(0))
    layers: dict[str, list] = {}
    for st in c.state:  # one layer: the outermost block around the read, below the root
        layers.setdefault(st.titles[0] if st.titles else "(root)", []).append(st)
    out = {
        "learned": _quantity(c.learned),
        "fixed": _quantity(c.fixed),
        "activated_per_token": _quantity(c.activated_per_token),
        "weight_bytes": {f: _quantity(c.bytes_at(f)) for f in FORMATS},
        "weights": fmt,
        "flops_per_token": _quantity(c.flops_per_token),
        "flops_per_call": _quantity(c.flops),
        "contraction_flops_per_token": _quantity(c.matmul_flops / c.tokens),
        "tokens_per_call": _quantity(c.tokens),
        "largest_array": None if largest is None else {
            "operator": largest.label, "json_path": largest.path,
            "axes": [a.label for a in largest.axes], "datatype": str(largest.datatype),
            "elements": _quantity(largest.elements),
            "bytes": _quantity(largest.bytes)},
        "decoder_state": {
            "bytes": _quantity(state_bytes),
            "per_token_bytes": _quantity(sum((s.bytes_per_token for s in c.state),
                                             sympy.Integer(0))),
            "layers": [{"layer": title,
                        "bytes": _quantity(sum((s.bytes for s in sts), sympy.Integer(0))),
                        "per_token_bytes": _quantity(sum((s.bytes_per_token for s in sts),
                                                         sympy.Integer(0)))}
                       for title, sts in layers.items()],
            "reads": [{"operator": s.label, "json_path": s.path, "datatype": str(s.datatype),
                       "titles": list(s.titles),
                       "per_token": _quantity(s.per_token),
                       "per_token_bytes": _quantity(s.bytes_per_token),
                       "window": _quantity(s.window),
                       "elements": _quantity(s.elements),
                       "bytes": _quantity(s.bytes)} for s in c.state]},
        "partial": c.partial,
    }
    return out


def _degree(term) -> float:
    """Total degree of a monomial in its symbols (1/b has -1); constants 0."""
    return float(sum(e for base, e in term.as_powers_dict().items() if base.free_symbols))


def _si(v, unit: str = "") -> str:
    """A number with an SI prefix; a formula (unbound sizes) by its leading term for large
    sizes, ``+...`` marking the rest."""
    if isinstance(v, str):
        try:
            terms = sympy.Add.make_args(sympy.sympify(v))
        except (sympy.SympifyError, TypeError, ValueError, AttributeError):
            terms = ()  # a formula sympy cannot read back (names such as x.y): shown as text
        if terms:
            lead = max(terms, key=lambda t: (_degree(t), abs(float(t.as_coeff_Mul()[0]))))
            coeff, rest = lead.as_coeff_Mul()
            text = _si(float(coeff), unit) if rest == 1 else \
                f"{_si(float(coeff), unit)}*{sympy.sstr(rest)}"
            return text + ("+..." if len(terms) > 1 else "")
        return v if len(v) <= 14 else v[:11] + "..."
    v = float(v)
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.4g} {prefix}{unit}"
    return f"{v:.4g} {unit}".rstrip()


def run(args) -> int:
    spec = load_spec(args)
    preset = args.preset or "released"
    policy = StoragePolicy.parse(args.weights)
    bare = [r.format for r in policy.rules if r.pattern == "*"]
    fmt = bare[0] if bare else "bfloat16"
    sizes = parse_assignments(args.size, "--size")
    binding = spec.bind(preset, sizes, parse_assignments(args.constant, "--constant"))
    site = spec.site(args.block) if args.block else None
    root = site.node if site else spec.data
    env = binding.env
    if args.tokens is not None:
        if args.tokens < 1:
            raise BindingError(f"--tokens {args.tokens}: the token count must be at least 1")
        axis = token_axis(spec, root)
        given = {s for k in sizes for s in match(spec.symbols.values(), k)}
        env = env.with_values(_solve_tokens(axis, env, args.tokens, given))
    memo = block_costs(root)
    rows = []
    base = len(site.titles) - 1 if site else 0
    for s in walk(root, titles=site.titles[:-1] if site else ()):
        node = s.node
        if not isinstance(node, Block) and s.node is not root:
            continue
        depth = max(len(s.titles) - base - 1, 0) if isinstance(node, Block) else 0
        if args.depth is not None and depth > args.depth:
            continue
        if (not args.all and isinstance(node, Block) and node is not root
                and node.tag.drawing is BlockDrawing.BODY_IN_PLACE):
            continue
        c = with_tokens(memo[id(node)], node)
        title = " / ".join(s.titles[base:]) if isinstance(node, Block) else "(whole model)"
        rows.append({"block": title, "json_path": s.path, "depth": depth,
                     "repetition": _repetition(node.tag.repetition) if isinstance(node, Block)
                     else 1, **summarise(c, env, fmt, formulas=args.json)})
    total = with_tokens(memo[id(root)], root)
    whole = summarise(total, env, fmt)
    whole["decoder_state"]["not_incremental"] = [r.describe() for r in analyse(root).reads
                                                 if r.kind in ("unbounded", "future")]
    if policy.rules:
        held = sum((p.bytes_at(policy.format_for(p.name) or fmt) for p in total.params
                    if p.learned), sympy.Integer(0))
        whole["policy_bytes"] = {"value": _value(held, env),
                                 "rules": [f"{r.pattern}={r.format}" for r in policy.rules]}
    if args.json:
        emit_json({"source": spec.source, "preset": preset, "tokens": args.tokens,
                   "weights": fmt, "rules": "ir/cost.py, ir/cost_rules.py, ir/weight_formats.py",
                   "blocks": rows, "total": whole})
        return 0
    if args.tokens is None:
        note_unbound(spec, binding, preset, "array sizes (per-token figures show their "
                     "leading term; --tokens N binds them)")
    _print(rows, whole, fmt, root is spec.data and spec.truncated)
    return 0


def _print(rows, whole, fmt: str, truncated: bool) -> None:
    head = (f"{'BLOCK':<44} {'LEARNED':>10} {'ACTIVE/TOK':>10} {fmt.upper() + ' BYTES':>14} "
            f"{'FLOPS/TOK':>10} {'LARGEST ARRAY':>13} {'DECODER':>10}")
    print(head)
    for r in rows:
        name = "  " * r["depth"] + r["block"].rsplit(" / ", 1)[-1]
        if r["repetition"] != 1:
            name += f" x{r['repetition']}"
        if len(name) > 44:
            name = name[:41] + "..."
        la = r["largest_array"]
        print(f"{name:<44} {_si(r['learned']['value']):>10} "
              f"{_si(r['activated_per_token']['value']):>10} "
              f"{_si(r['weight_bytes'][fmt]['value'], 'B'):>14} "
              f"{_si(r['flops_per_token']['value']):>10} "
              f"{_si(la['bytes']['value'], 'B') if la else '-':>13} "
              f"{_si(r['decoder_state']['bytes']['value'], 'B'):>10}")
    w = whole
    print()
    print(f"total{' (salvaged part)' if truncated else ''}:")
    print(f"  learned elements        {_fmt_int(w['learned']['value'])}   "
          f"[{w['learned']['formula'][:120]}]")
    print(f"  fixed elements          {_fmt_int(w['fixed']['value'])}")
    print(f"  activated per token     {_fmt_int(w['activated_per_token']['value'])}")
    for f in FORMATS:
        mark = "  <- --weights" if f == fmt else ""
        print(f"  bytes at {f:<14} {_si(w['weight_bytes'][f]['value'], 'B')}{mark}")
    if "policy_bytes" in w:
        print(f"  bytes under --weights   {_si(w['policy_bytes']['value'], 'B')} "
              f"({', '.join(w['policy_bytes']['rules'])}; others {fmt})")
    print(f"  FLOPs per token         {_si(w['flops_per_token']['value'])}")
    la = w["largest_array"]
    if la:
        print(f"  largest array           {la['datatype']}[{', '.join(la['axes'])}] "
              f"{_si(la['elements']['value'])} elements, {_si(la['bytes']['value'], 'B')} "
              f"({la['operator']})")
    ds = w["decoder_state"]
    for s in ds["reads"]:
        print(f"  decoder state           {_si(s['bytes']['value'], 'B')}: {s['operator']} keeps "
              f"{s['per_token']['value']} x {s['datatype']} per token for "
              f"{s['window']['value']} - 1 tokens")
    if ds["reads"]:
        print(f"  decoder state in all    {_si(ds['bytes']['value'], 'B')}, "
              f"{_si(ds['per_token_bytes']['value'], 'B')} per token kept")
        for lay in ds["layers"]:
            print(f"    per layer             {_si(lay['bytes']['value'], 'B')}, "
                  f"{_si(lay['per_token_bytes']['value'], 'B')} per token kept: {lay['layer']}")
    for why in ds["not_incremental"]:
        print(f"  not incremental         {why}")
    print("  (counting rules: ir/cost.py, ir/cost_rules.py, ir/weight_formats.py)")


def _fmt_int(v) -> str:
    return f"{v:,}" if isinstance(v, int) else str(v)
