"""Checkpoint maps: declarative rules from an external checkpoint's tensor names to ncdc's
parameter keys (docs/checkpoints.md has the format and a worked example).

A map is a TOML or JSON document::

    ignore = ['lm_head\\.weight']            # tensors this model does not use (regexes)

    [dequantize]                             # FP8 weights with block scales
    scale = '${tensor}_scale_inv'            # the scale tensor of a weight
    block = [128, 128]                       # elements per scale along each axis

    [[rules]]
    tensor = 'model\\.layers\\.0\\.mlp\\.experts\\.(?P<e>\\d+)\\.gate_proj\\.weight'
    key = 'Sliding Window Layer/.../Routed Experts/W^{G}.weight'
    transpose = true                         # or permute = [1, 0]
    stack = { index = 'e', axis = 1 }        # expert e goes to index e of axis 1

A tensor name is matched against every rule's ``tensor`` regex (whole name, first rule wins);
``${name}`` in ``key`` is replaced by the named capture. The regexes are held to a checked
safe subset and the names to a bounded length (:mod:`ncdc.checkpoint.saferegex`). The transforms run in this order:
dequantize (when the scale tensor exists), ``split`` into parts along an axis (each part with
its own ``key``), ``permute``/``transpose``, ``dtype``, then a row-major reshape to the key's
shape, or to the shape of one slice of it for ``stack``.
"""
from __future__ import annotations

import json
import os
import re
import reprlib
from dataclasses import dataclass, field

from . import saferegex
from .builtin import BUILTIN, builtin_path
from .errors import CheckpointError, MapError

CAPTURE = re.compile(r"\$\{(\w+)\}")
DTYPES = ("float64", "float32", "bfloat16", "float16")
TOP_KEYS = {"rules", "ignore", "dequantize", "schemes", "description", "format"}
RULE_KEYS = {"tensor", "key", "name", "transpose", "permute", "stack", "split", "dtype",
             "scale", "dequantize", "multiply"}
CODES = ("values", "e2m1")
"""What a quantised weight's elements are: ``values`` (its own numbers, e.g. E4M3 codes read
as floats) or ``e2m1`` (FP4 codes packed two to a byte along the last axis, low nibble
first)."""
SCHEME_KEYS = {"scale", "block", "codes"}
NAME_VARS = {"tensor", "stem"}
"""Template variables every tensor-name template has besides the rule's captures: the whole
tensor name, and the name without its last dot-separated part."""
MAX_RULES = 10_000
"""Most rules, and most ignore patterns, a map may have."""
MAX_DEPTH = 32
"""Deepest nesting of tables/lists a map document may have."""
MAX_BLOCK = 1 << 31
"""Largest dequantisation block along an axis."""
MAX_INDEX_DIGITS = 9
"""Longest stack index capture (decimal digits)."""
_short = reprlib.Repr()
_short.maxstring = _short.maxother = 60
_short.maxlevel = 3


def show(value) -> str:
    """A value as errors quote it: ``repr`` cut to a short line, nesting included."""
    return _short.repr(value)


@dataclass(frozen=True)
class Stack:
    index: str
    axis: int


@dataclass(frozen=True)
class Split:
    axis: int
    keys: tuple[str, ...]
    sizes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Multiply:
    """Multiply a tensor (each part of a split) by another checkpoint tensor ``tensor`` (a
    name template), indexed along its first axis by ``index[part]`` when given."""

    tensor: str
    index: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Rule:
    number: int
    tensor: re.Pattern
    key: str | None = None
    name: str = ""
    permute: tuple[int, ...] | None = None
    stack: Stack | None = None
    split: Split | None = None
    dtype: str | None = None
    scale: str | None = None
    dequantize: str | None = None
    multiply: Multiply | None = None

    @property
    def label(self) -> str:
        """How errors name the rule: ``rule 3 (NAME)`` or ``rule 3 ('regex')``."""
        return f"rule {self.number} ({self.name or repr(self.tensor.pattern)})"

    def keys(self) -> tuple[str, ...]:
        return self.split.keys if self.split is not None else (self.key,)


@dataclass(frozen=True)
class Dequantize:
    """A dequantisation scheme: the scale tensor's name template, the elements each scale
    covers along each axis (of the unpacked weight), and what the weight's elements are."""

    scale: str = "${tensor}_scale_inv"
    block: tuple[int, ...] = (128, 128)
    codes: str = "values"


@dataclass(frozen=True)
class CheckpointMap:
    rules: tuple[Rule, ...]
    ignore: tuple[re.Pattern, ...] = ()
    dequantize: Dequantize | None = None
    path: str = ""
    description: str = ""
    problems: tuple[str, ...] = field(default=(), compare=False)
    schemes: dict = field(default_factory=dict, compare=False)

    def scheme(self, rule: Rule) -> Dequantize | None:
        """The dequantisation scheme of ``rule``: the one it names, else the map's default
        (``[dequantize]``, its ``scale`` replaced by the rule's own ``scale`` if given)."""
        if rule.dequantize is not None:
            return self.schemes[rule.dequantize]
        if rule.scale is not None:
            base = self.dequantize or Dequantize()
            return Dequantize(rule.scale, base.block, base.codes)
        return self.dequantize

    def match(self, name: str):
        """``(rule, match)`` of the first rule whose regex matches all of ``name``, or None."""
        _check_name(name)
        for r in self.rules:
            m = r.tensor.fullmatch(name)
            if m is not None:
                return r, m
        return None

    def ignored(self, name: str) -> bool:
        _check_name(name)
        return any(p.fullmatch(name) for p in self.ignore)


def _check_name(name: str) -> None:
    if len(name) > saferegex.MAX_NAME:
        raise CheckpointError(f"tensor name {show(name)} is {len(name)} characters long; a "
                              f"mapped checkpoint's names have at most {saferegex.MAX_NAME}")


def capture(m: re.Match, group: str, what: str) -> str:
    """The text of capture ``group`` of ``m``; a group that did not take part in the match is
    a :class:`CheckpointError` naming ``what``."""
    text = m.group(group)
    if text is None:
        raise CheckpointError(f"{what}: capture {group!r} did not take part in the match of "
                              f"{show(m.string)}")
    return text


def stack_index(m: re.Match, group: str, what: str) -> int:
    """Capture ``group`` of ``m`` as a stack index: 1 to 9 ASCII digits, else a
    :class:`CheckpointError` naming ``what``."""
    text = capture(m, group, what)
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_INDEX_DIGITS):
        raise CheckpointError(f"{what}: stack index capture {group!r} is {show(text)}, not a "
                              f"whole number of at most {MAX_INDEX_DIGITS} digits")
    return int(text)


def expand(template: str, m: re.Match, what: str = "key") -> str:
    """``template`` with every ``${name}`` replaced by the capture ``name`` of ``m``."""
    return CAPTURE.sub(lambda c: capture(m, c.group(1), what), template)


def tensor_name(template: str, m: re.Match, what: str) -> str:
    """A tensor-name template expanded for the tensor ``m`` matched: ``${tensor}`` is its
    name, ``${stem}`` its name without the last dot-separated part, ``${capture}`` a capture
    of the rule's regex."""
    name = m.string

    def one(c):
        var = c.group(1)
        if var == "tensor" and "tensor" not in m.re.groupindex:
            return name
        if var == "stem" and "stem" not in m.re.groupindex:
            return name.rpartition(".")[0] or name
        return capture(m, var, what)
    return CAPTURE.sub(one, template)


def _depth_ok(doc, limit: int = MAX_DEPTH) -> bool:
    """Whether ``doc`` (parsed JSON/TOML) nests tables and lists at most ``limit`` deep."""
    todo = [(doc, 0)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (dict, list)):
            if d >= limit:
                return False
            todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return True


def load_map(path) -> CheckpointMap:
    """Read and check a map: a built-in map's name (:data:`BUILTIN`) or a map file
    (``.toml`` or ``.json``); every problem is reported at once in one :class:`MapError`."""
    path = os.fspath(path)
    path = builtin_path(path) or path
    try:
        with open(path, "rb") as fh:
            raw = fh.read(16 << 20)
    except OSError as exc:
        raise MapError(f"cannot read checkpoint map {path!r}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
        if path.lower().endswith(".toml"):
            import tomllib

            doc = tomllib.loads(text)
        else:
            doc = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise MapError(f"checkpoint map {path!r} is not valid "
                       f"{'TOML' if path.lower().endswith('.toml') else 'JSON'}: {why}") from None
    return parse_map(doc, path)


def _int_list(value, what, problems, n=None) -> tuple[int, ...] | None:
    if not (isinstance(value, list) and all(type(v) is int for v in value)) or (
            n is not None and len(value) != n):
        problems.append(f"{what} must be a list of {n or ''}{' ' if n else ''}whole numbers, "
                        f"not {show(value)}")
        return None
    return tuple(value)


def _regex(text, what, problems) -> re.Pattern | None:
    if not isinstance(text, str):
        problems.append(f"{what} must be a regex string, not {show(text)}")
        return None
    why = saferegex.check(text)
    if why is None:
        try:
            return re.compile(text)
        except (re.error, OverflowError, RecursionError, ValueError) as exc:
            why = f"not a valid regex: {exc}"
    problems.append(f"{what} {show(text)} is outside the regexes a map may use: {why}")
    return None


def _rule(i: int, e, problems: list[str], schemes: dict) -> Rule | None:  # noqa: C901 - one check per field of a rule table
    where = f"rule {i}"
    if not isinstance(e, dict):
        problems.append(f"{where} must be a table (object), not {type(e).__name__}")
        return None
    if isinstance(e.get("name"), str):
        where = f"rule {i} ({e['name'][:60]})"
    before = len(problems)
    for k in sorted(set(e) - RULE_KEYS):
        problems.append(f"{where}: unknown field {show(k)} "
                        f"(known: {', '.join(sorted(RULE_KEYS))})")
    pat = _regex(e.get("tensor"), f"{where}: 'tensor'", problems)
    groups = set(pat.groupindex) if pat is not None else set()
    key, split, stack, perm, dtype = e.get("key"), None, None, None, e.get("dtype")
    if "split" in e:
        s = e["split"]
        if not isinstance(s, dict) or not isinstance(s.get("keys"), list) or not s["keys"] \
                or not all(isinstance(k, str) for k in s["keys"]):
            problems.append(f"{where}: 'split' needs 'keys', a list of parameter keys")
        else:
            sizes = s.get("sizes")
            if sizes is not None:
                sizes = _int_list(sizes, f"{where}: split 'sizes'", problems, len(s["keys"]))
                if sizes is not None and any(n < 0 for n in sizes):
                    problems.append(f"{where}: split 'sizes' must not be negative")
                    sizes = None
            axis = s.get("axis", 0)
            if type(axis) is not int:
                problems.append(f"{where}: split 'axis' must be a whole number")
                axis = 0
            split = Split(axis, tuple(s["keys"]), sizes)
        if key is not None:
            problems.append(f"{where}: give 'key' or 'split', not both")
    elif not isinstance(key, str) or not key:
        problems.append(f"{where}: 'key' (the ncdc parameter key) is required")
    if "stack" in e:
        s = e["stack"]
        if not isinstance(s, dict) or not isinstance(s.get("index"), str) or \
                type(s.get("axis", 0)) is not int:
            problems.append(f"{where}: 'stack' needs 'index' (a capture name) and 'axis'")
        else:
            stack = Stack(s["index"], s.get("axis", 0))
            if pat is not None and stack.index not in groups:
                problems.append(f"{where}: stack index {stack.index!r} is not a named capture "
                                f"of the tensor regex")
    if "permute" in e and "transpose" in e:
        problems.append(f"{where}: give 'permute' or 'transpose', not both")
    if "permute" in e:
        perm = _int_list(e["permute"], f"{where}: 'permute'", problems)
        if perm is not None and sorted(perm) != list(range(len(perm))):
            problems.append(f"{where}: 'permute' {list(perm)} is not a permutation of "
                            f"0..{len(perm) - 1}")
    elif "transpose" in e:
        if e["transpose"] is True:
            perm = (1, 0)
        elif e["transpose"] is not False:
            problems.append(f"{where}: 'transpose' must be true or false")
    if dtype is not None and dtype not in DTYPES:
        problems.append(f"{where}: dtype {show(dtype)} is not one of {', '.join(DTYPES)}")
    for k in ([key] if isinstance(key, str) else []) + list(split.keys if split else []):
        for name in CAPTURE.findall(k):
            if pat is not None and name not in groups:
                problems.append(f"{where}: key {k!r} uses ${{{name}}}, which is not a named "
                                "capture of the tensor regex")
    scale = e.get("scale")
    if scale is not None and not isinstance(scale, str):
        problems.append(f"{where}: 'scale' must be a tensor name template")
    elif scale is not None:
        _template_vars(scale, groups, pat, f"{where}: scale", problems)
    scheme = e.get("dequantize")
    if scheme is not None and (not isinstance(scheme, str) or scheme not in schemes):
        problems.append(f"{where}: dequantize {show(scheme)} names no scheme of the map's "
                        f"'schemes' (known: {', '.join(sorted(schemes)) or 'none'})")
    elif scheme is not None and scale is not None:
        problems.append(f"{where}: give 'scale' or 'dequantize', not both")
    elif scheme is not None:
        _template_vars(schemes[scheme].scale, groups, pat,
                       f"{where}: scheme {scheme!r} scale", problems)
    mult = _multiply(e["multiply"], where, groups, pat, split, problems) \
        if "multiply" in e else None
    if len(problems) > before or pat is None:
        return None
    return Rule(i, pat, key if split is None else None, e.get("name") or "", perm, stack, split,
                dtype, scale, scheme, mult)


def _template_vars(template: str, groups, pat, what: str, problems: list[str]) -> None:
    """Every ``${name}`` of a tensor-name template is a capture or a name variable."""
    for name in CAPTURE.findall(template):
        if pat is not None and name not in groups and name not in NAME_VARS:
            problems.append(f"{what} {template!r} uses ${{{name}}}, which is neither a named "
                            f"capture of the tensor regex nor one of "
                            f"{', '.join('${' + v + '}' for v in sorted(NAME_VARS))}")


def _multiply(m, where: str, groups, pat, split, problems: list[str]) -> Multiply | None:
    if not isinstance(m, dict) or set(m) - {"tensor", "index"} or \
            not isinstance(m.get("tensor"), str) or not m["tensor"]:
        problems.append(f"{where}: 'multiply' is a table with 'tensor' (a tensor name "
                        "template) and optional 'index'")
        return None
    _template_vars(m["tensor"], groups, pat, f"{where}: multiply", problems)
    index = m.get("index")
    if index is not None:
        parts = len(split.keys) if split is not None else 1
        if type(index) is int:
            index = [index]
        index = _int_list(index, f"{where}: multiply 'index'", problems, parts)
        if index is not None and any(not 0 <= k <= MAX_BLOCK for k in index):
            problems.append(f"{where}: multiply 'index' entries must be from 0 to {MAX_BLOCK}")
            index = None
        if index is None:
            return None
    return Multiply(m["tensor"], index)


def _scheme(d, what: str, problems: list[str]) -> Dequantize | None:
    """A dequantisation scheme table (``scale``, ``block``, ``codes``)."""
    if not isinstance(d, dict) or set(d) - SCHEME_KEYS:
        problems.append(f"{what} is a table with 'scale', 'block' and 'codes'")
        return None
    block = _int_list(d.get("block", [128, 128]), f"{what} 'block'", problems)
    if block is not None and not all(0 < b <= MAX_BLOCK for b in block):
        problems.append(f"{what} 'block' sizes must be from 1 to {MAX_BLOCK}")
    scale = d.get("scale", Dequantize.scale)
    if not isinstance(scale, str) or not any(f"${{{v}}}" in scale for v in NAME_VARS):
        problems.append(f"{what} 'scale' must be a template containing ${{tensor}} or "
                        "${stem}")
    codes = d.get("codes", "values")
    if codes not in CODES:
        problems.append(f"{what} 'codes' {show(codes)} is not one of {', '.join(CODES)}")
    return Dequantize(scale, block or (128, 128), codes)


def parse_map(doc, path: str = "<map>") -> CheckpointMap:
    """A :class:`CheckpointMap` from a parsed document (see the module docstring)."""
    problems: list[str] = []
    if not isinstance(doc, dict):
        raise MapError(f"checkpoint map {path!r}: the document must be a table (object)")
    if not _depth_ok(doc):
        raise MapError(f"checkpoint map {path!r}: nested more than {MAX_DEPTH} levels deep")
    for k in sorted(set(doc) - TOP_KEYS):
        problems.append(f"unknown field {show(k)} (known: {', '.join(sorted(TOP_KEYS))})")
    entries = doc.get("rules")
    if not isinstance(entries, list) or not entries:
        problems.append("'rules' must be a non-empty list of rules")
        entries = []
    ign = doc.get("ignore")
    if len(entries) > MAX_RULES or (isinstance(ign, list) and len(ign) > MAX_RULES):
        raise MapError(f"checkpoint map {path!r}: more than {MAX_RULES} rules or ignore "
                       "patterns")
    schemes: dict[str, Dequantize] = {}
    raw = doc.get("schemes", {})
    if not isinstance(raw, dict) or len(raw) > MAX_RULES:
        problems.append("'schemes' must be a table of named dequantisation schemes")
        raw = {}
    for name, d in raw.items():
        if (sch := _scheme(d, f"scheme {name!r}", problems)) is not None:
            schemes[name] = sch
    rules = [r for i, e in enumerate(entries, 1)
             if (r := _rule(i, e, problems, schemes)) is not None]
    ignore_list = doc.get("ignore", [])
    if not isinstance(ignore_list, list):
        problems.append("'ignore' must be a list of regexes")
        ignore_list = []
    ignore = [p for j, t in enumerate(ignore_list)
              if (p := _regex(t, f"ignore[{j}]", problems)) is not None]
    deq = None
    if "dequantize" in doc:
        deq = _scheme(doc["dequantize"], "dequantize", problems)
    if problems:
        more = f"; ... (and {len(problems) - 20} more)" if len(problems) > 20 else ""
        raise MapError(f"checkpoint map {path!r} has {len(problems)} problem(s): "
                       + "; ".join(problems[:20]) + more)
    return CheckpointMap(tuple(rules), tuple(ignore), deq, path,
                         str(doc.get("description", "")), schemes=schemes)


__all__ = ["BUILTIN", "CheckpointMap", "builtin_path", "Dequantize", "MapError", "Multiply", "Rule", "Split", "Stack",
           "capture", "expand", "load_map", "parse_map", "show", "stack_index", "tensor_name"]
