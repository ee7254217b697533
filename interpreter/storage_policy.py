"""Weight storage formats: a policy mapping parameter keys to formats, and the encoding of a
float array into one (and back).

Formats (``ir.weight_formats.FORMATS``): ``float32``, ``bfloat16``, ``mxfp8`` (E4M3 elements and one
UE8M0 scale per 32 consecutive values) and ``mxfp4`` (E2M1 elements packed two to a byte, low
nibble first, with the same scales). Block scales group runs along the axes a ``Linear`` weight
contracts (its input axes, flattened), along the trailing axis for every other array
(:func:`ir.weight_formats.scale_layout`); a run whose length is not a multiple of 32 ends in a partial
group. The scale of a group is DeepSeek's recipe, the one the spec's "Cast to MXFP8" blocks
state: ``2^ceil(log2(max(amax, 1e-4) / M))`` with ``M`` the element format's largest value (448,
6), so no element saturates. Element codes are ml_dtypes' own round-to-nearest-even conversions
(``float8_e4m3fn``, ``float4_e2m1fn``, ``float8_e8m0fnu``, ``bfloat16``); decoding multiplies
codes by scales in float64, exactly.

A policy is an ordered list of rules ``PATTERN=FORMAT`` (``fnmatch`` patterns over the keys
``ncdc params`` lists; the first matching rule wins; a bare ``FORMAT`` means every key), given
on the command line or in a JSON or TOML file::

    {"rules": [{"pattern": "*/Routed Experts/*", "format": "mxfp4"},
               {"pattern": "*", "format": "mxfp8"}]}

The interpreter applies it when parameters are built: every learned real array a rule names is
encoded and the value it holds becomes the decoded array, as a checkpoint in that format would
give it.
"""
from __future__ import annotations

import fnmatch
import json
import tomllib
from dataclasses import dataclass

import numpy as np

from ncdc.ir.datatypes import kind
from ncdc.ir.errors import EvaluationError
from ncdc.ir.params import param_specs
from ncdc.ir.weight_formats import format_name, weight_lead

from .params import Params, build_params

GROUP = 32


def element(fmt: str):
    """The element dtype of an MX format and its largest finite value (``ml_dtypes``, imported
    on first use: it costs about a second)."""
    import ml_dtypes

    return {"mxfp8": (ml_dtypes.float8_e4m3fn, 448.0),
            "mxfp4": (ml_dtypes.float4_e2m1fn, 6.0)}[fmt]


@dataclass(frozen=True)
class Rule:
    pattern: str
    format: str


@dataclass(frozen=True)
class StoragePolicy:
    """Ordered rules; :meth:`format_for` gives the first match's format (None: no rule)."""

    rules: tuple[Rule, ...] = ()

    def format_for(self, key: str) -> str | None:
        for r in self.rules:
            if fnmatch.fnmatchcase(key, r.pattern):
                return r.format
        return None

    @classmethod
    def parse(cls, items) -> StoragePolicy:
        """Rules from command-line items: ``FORMAT``, ``PATTERN=FORMAT`` or a ``.json`` /
        ``.toml`` file of rules."""
        rules: list[Rule] = []
        for item in items or ():
            text = str(item).strip()
            if text.endswith((".json", ".toml")) and "=" not in text:
                rules.extend(cls.from_file(text).rules)
                continue
            pattern, sep, fmt = text.rpartition("=")
            rules.append(_rule(pattern if sep else "*", fmt, f"--weights {text!r}"))
        return cls(tuple(rules))

    @classmethod
    def from_file(cls, path: str) -> StoragePolicy:
        try:
            with open(path, "rb") as fh:
                raw = fh.read(1 << 20)
        except OSError as exc:
            raise EvaluationError(f"cannot read storage policy {path!r}: "
                                  f"{exc.strerror or exc}") from None
        try:
            if path.endswith(".toml"):
                doc = tomllib.loads(raw.decode("utf-8"))
            else:
                doc = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise EvaluationError(f"storage policy {path!r} is not valid: {exc}") from None
        entries = doc.get("rules") if isinstance(doc, dict) else doc
        if not isinstance(entries, list):
            raise EvaluationError(f"storage policy {path!r}: expected a list of rules "
                                  "(objects with 'pattern' and 'format')")
        rules = []
        for i, e in enumerate(entries):
            if not isinstance(e, dict) or not isinstance(e.get("format"), str):
                raise EvaluationError(f"storage policy {path!r}: rule {i} needs a 'format'")
            rules.append(_rule(str(e.get("pattern", "*")), e["format"], f"{path} rule {i}"))
        return cls(tuple(rules))


def _rule(pattern: str, fmt: str, where: str) -> Rule:
    try:
        return Rule(pattern or "*", format_name(fmt))
    except ValueError as exc:
        raise EvaluationError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class Stored:
    """An array held in a weight format: ``codes`` (float32 / bfloat16 values, E4M3 codes, or
    E2M1 codes packed two per byte) and, for MX formats, UE8M0 ``scales`` per (row, group)."""

    format: str
    shape: tuple[int, ...]
    lead: int
    codes: np.ndarray
    scales: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + (0 if self.scales is None else self.scales.nbytes))


def _layout(shape, lead) -> tuple[int, int]:
    """(rows, run) as ints, by the rule of :func:`ir.weight_formats.scale_layout`."""
    if not shape:
        return 1, 1
    if 0 < lead < len(shape):
        return int(np.prod(shape[lead:])), int(np.prod(shape[:lead]))
    if lead >= len(shape):
        return 1, int(np.prod(shape))
    return int(np.prod(shape[:-1])), int(shape[-1])


def _runs(x: np.ndarray, lead: int) -> np.ndarray:
    rows, run = _layout(x.shape, lead)
    if 0 < lead < x.ndim:
        return x.reshape(run, rows).T
    return x.reshape(rows, run)


def _unruns(r: np.ndarray, shape, lead: int) -> np.ndarray:
    if 0 < lead < len(shape):
        return np.ascontiguousarray(r.T).reshape(shape)
    return r.reshape(shape)


def mx_scales(groups: np.ndarray, top: float) -> np.ndarray:
    """Power-of-two scale per group (last axis): ``2^ceil(log2(max(amax, 1e-4) / top))``,
    the ceiling taken exactly with ``frexp``."""
    a = np.max(np.abs(groups), axis=-1)
    m, e = np.frexp(np.maximum(a, 1e-4) / top)
    return np.ldexp(1.0, np.where(m == 0.5, e - 1, e))


def encode(x, fmt: str, lead: int = 0) -> Stored:
    """``x`` (real) held in weight format ``fmt``."""
    import ml_dtypes

    fmt = format_name(fmt)
    x = np.asarray(x, dtype=np.float64)
    if fmt == "float32":
        return Stored(fmt, x.shape, lead, x.astype(np.float32))
    if fmt == "bfloat16":
        return Stored(fmt, x.shape, lead, x.astype(ml_dtypes.bfloat16))
    elem, top = element(fmt)
    r = _runs(x, lead)
    rows, run = r.shape
    pad = -run % GROUP
    g = np.pad(r, ((0, 0), (0, pad))).reshape(rows, -1, GROUP)
    s = mx_scales(g, top)
    codes = (g / s[..., None]).astype(elem).reshape(rows, -1)[:, :run]  # padding not kept
    if fmt == "mxfp4":
        nib = np.pad(codes.view(np.uint8) & 0x0F, ((0, 0), (0, run % 2)))
        codes = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    return Stored(fmt, x.shape, lead, codes, s.astype(ml_dtypes.float8_e8m0fnu))


def decode(st: Stored) -> np.ndarray:
    """The float64 values a stored array denotes."""
    import ml_dtypes

    if st.scales is None:
        return st.codes.astype(np.float64)
    rows, run = _layout(st.shape, st.lead)
    codes = st.codes
    if st.format == "mxfp4":
        nib = np.empty((rows, codes.shape[1] * 2), np.uint8)
        nib[:, 0::2] = codes & 0x0F
        nib[:, 1::2] = codes >> 4
        codes = nib[:, :run].view(ml_dtypes.float4_e2m1fn)
    vals = np.pad(codes.astype(np.float64), ((0, 0), (0, -run % GROUP)))
    vals = vals.reshape(rows, -1, GROUP) * st.scales.astype(np.float64)[..., None]
    return _unruns(vals.reshape(rows, -1)[:, :run], st.shape, st.lead)


def apply_policy(params: dict, specs, policy: StoragePolicy):
    """``params`` with every learned real array a rule names replaced by its value in that
    format (same dict type, extra attributes kept), and ``[(key, format, stored bytes)]``."""
    if not policy.rules:
        return params, []

    out = Params(params, stand_ins=getattr(params, "stand_ins", ()),
                 computed=getattr(params, "computed", ()))
    report = []
    for spec in specs:
        fmt = policy.format_for(spec.key)
        if fmt is None or not spec.learned or kind(spec.datatype) != "real":
            continue
        if spec.key not in out:
            continue
        st = encode(out[spec.key], fmt, weight_lead(spec.site, spec.role))
        out[spec.key] = decode(st)
        report.append((spec.key, fmt, st.nbytes))
    return out, report


def weights_params(morphism, env, params, items, *, seed: int = 0, stand_in: bool = False):
    """The parameters to interpret ``morphism`` with under the policy ``items`` (command-line
    ``--weights`` values): ``params`` (or a seeded initialisation) with the policy applied.
    Returns ``params`` unchanged without rules."""
    policy = StoragePolicy.parse(items)
    if not policy.rules:
        return params, []


    specs = param_specs(morphism, env)
    built = build_params(specs, env, params, seed, stand_in)
    return apply_policy(built, specs, policy)


__all__ = ["Rule", "StoragePolicy", "Stored", "apply_policy", "decode",
           "encode", "mx_scales", "weights_params"]
