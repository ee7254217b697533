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
from .errors import CheckpointError, MapError

CAPTURE = re.compile(r"\$\{(\w+)\}")
DTYPES = ("float64", "float32", "bfloat16", "float16")
TOP_KEYS = {"rules", "ignore", "dequantize", "description", "format"}
RULE_KEYS = {"tensor", "key", "name", "transpose", "permute", "stack", "split", "dtype",
             "scale"}
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

    @property
    def label(self) -> str:
        """How errors name the rule: ``rule 3 (NAME)`` or ``rule 3 ('regex')``."""
        return f"rule {self.number} ({self.name or repr(self.tensor.pattern)})"

    def keys(self) -> tuple[str, ...]:
        return self.split.keys if self.split is not None else (self.key,)


@dataclass(frozen=True)
class Dequantize:
    scale: str = "${tensor}_scale_inv"
    block: tuple[int, ...] = (128, 128)


@dataclass(frozen=True)
class CheckpointMap:
    rules: tuple[Rule, ...]
    ignore: tuple[re.Pattern, ...] = ()
    dequantize: Dequantize | None = None
    path: str = ""
    description: str = ""
    problems: tuple[str, ...] = field(default=(), compare=False)

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
    """Read and check a map file (``.toml`` or ``.json``); every problem is reported at once
    in one :class:`MapError`."""
    path = os.fspath(path)
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


def _rule(i: int, e, problems: list[str]) -> Rule | None:  # noqa: C901 - one check per field of a rule table
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
    if len(problems) > before or pat is None:
        return None
    return Rule(i, pat, key if split is None else None, e.get("name") or "", perm, stack, split,
                dtype, scale)


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
    rules = [r for i, e in enumerate(entries, 1) if (r := _rule(i, e, problems)) is not None]
    ignore_list = doc.get("ignore", [])
    if not isinstance(ignore_list, list):
        problems.append("'ignore' must be a list of regexes")
        ignore_list = []
    ignore = [p for j, t in enumerate(ignore_list)
              if (p := _regex(t, f"ignore[{j}]", problems)) is not None]
    deq = None
    if "dequantize" in doc:
        d = doc["dequantize"]
        if not isinstance(d, dict) or set(d) - {"scale", "block"}:
            problems.append("'dequantize' is a table with 'scale' and 'block'")
        else:
            block = _int_list(d.get("block", [128, 128]), "dequantize 'block'", problems)
            if block is not None and not all(0 < b <= MAX_BLOCK for b in block):
                problems.append(f"dequantize 'block' sizes must be from 1 to {MAX_BLOCK}")
            scale = d.get("scale", Dequantize.scale)
            if not isinstance(scale, str) or "${tensor}" not in scale:
                problems.append("dequantize 'scale' must be a template containing ${tensor}")
            deq = Dequantize(scale, block or (128, 128))
    if problems:
        more = f"; ... (and {len(problems) - 20} more)" if len(problems) > 20 else ""
        raise MapError(f"checkpoint map {path!r} has {len(problems)} problem(s): "
                       + "; ".join(problems[:20]) + more)
    return CheckpointMap(tuple(rules), tuple(ignore), deq, path,
                         str(doc.get("description", "")))


__all__ = ["CheckpointMap", "Dequantize", "MapError", "Rule", "Split", "Stack", "capture",
           "expand", "load_map", "parse_map", "show", "stack_index"]
