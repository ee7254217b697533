"""Hostile checkpoint maps and checkpoints for the fuzz campaign (``bench/fuzz.py``).

A case is a checkpoint of the transformer example's learned arrays, one safetensors tensor
per parameter key (``model.<i>.w``), and a map naming them, both derived from the case number;
one of them is then made hostile: a map field replaced by a hostile value (regexes that
backtrack, captures that are not numbers or did not match, negative split sizes, huge blocks,
retyped and missing fields), a map nested deep, a map that is not TOML, or a checkpoint whose
safetensors header lies (overlapping or out-of-file offsets, huge header lengths, nested JSON,
unknown dtypes).
"""
from __future__ import annotations

import functools
import json
import random
import struct
from pathlib import Path

HOSTILE_REGEXES = [r"ffn\.(a+)+b", r"(a*b)*c", r"(a|aa)+b", "a{4294967296}", "a{2000}",
                   ".*.*.*.*x", "(" * 300 + ")" * 300, "x" * 5000, "(", r"model\.(?P<i>\d+)\.w",
                   r"model\.(?P<i>[a-z]+)\.w", r"model\.(?P<i>\d+)?x?\.w", r"(?P<i>.*)",
                   "model\\.0\\.w" + "|model\\.0\\.w" * 50, r"\d{999}"]
HOSTILE_VALUES = [None, True, -1, 0, 2**62, 2**64, -2**40, 1.5, float("nan"), "", "x" * 10_000,
                  [], {}, [-3, 5], [0, 0], [2**62, 1], ["a"], {"index": "i", "axis": -9},
                  {"index": "i", "axis": 99}, {"index": "nope", "axis": 0},
                  {"axis": 0, "keys": ["a", "b"], "sizes": [-1, 3]},
                  {"axis": 0, "keys": [], "sizes": []}, "${nope}", "${i}", "\ud800"]
FIELDS = ["tensor", "key", "name", "transpose", "permute", "stack", "split", "dtype", "scale",
          "bogus"]


@functools.cache
def _keys(spec_path: Path) -> list[tuple[str, tuple[int, ...]]]:
    import ncdc

    spec = ncdc.load(spec_path)
    binding = spec.bind("tiny")
    return tuple((p.key, tuple(binding.env.size(s) for s in p.shape))
                 for p in spec.params(binding=binding) if p.learned)


def _safetensors(path: Path, header, data: bytes, length: int | None = None) -> None:
    raw = header.encode("utf-8", "surrogatepass") if isinstance(header, str) else \
        json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)


def checkpoint(path: Path, keys) -> dict:
    """A valid checkpoint of ``keys`` (F32 zeros) at ``path``; its header."""
    header, offset = {}, 0
    for i, (_, shape) in enumerate(keys):
        n = 4
        for d in shape:
            n *= d
        header[f"model.{i}.w"] = {"dtype": "F32", "shape": list(shape),
                                  "data_offsets": [offset, offset + n]}
        offset += n
    _safetensors(path, header, bytes(offset))
    return header


def valid_map(keys) -> dict:
    return {"description": "fuzz", "rules": [{"tensor": rf"model\.{i}\.w", "key": key}
                                             for i, (key, _) in enumerate(keys)]}


def _toml(doc: dict) -> str:
    """``doc`` (a map of plain values) as TOML, each rule an inline table."""
    def value(v):
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if v is None:
            return '""'
        if isinstance(v, float) and v != v:
            return "nan"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + "}"
    lines = [f"{k} = {value(v)}" for k, v in doc.items() if k != "rules"]
    lines.append("rules = [")
    lines += [f"  {value(r)}," for r in doc.get("rules", [])]
    lines.append("]")
    return "\n".join(lines) + "\n"


def _hostile_map(doc: dict, rng: random.Random) -> tuple[str, str, str]:
    """(text, suffix, what) of a hostile variant of ``doc``."""
    kind = rng.randrange(8)
    rules = doc["rules"]
    if kind <= 2:
        rule = rng.choice(rules)
        field = rng.choice(FIELDS)
        rule[field] = rng.choice(HOSTILE_REGEXES) if field in ("tensor", "key") and \
            rng.random() < 0.6 else rng.choice(HOSTILE_VALUES)
        what = f"rule field {field}"
    elif kind == 3:
        doc["ignore"] = [rng.choice(HOSTILE_REGEXES) for _ in range(rng.randrange(1, 4))]
        what = "ignore regexes"
    elif kind == 4:
        doc["dequantize"] = {"scale": rng.choice(["${tensor}_s", "${nope}", "", "x"]),
                             "block": rng.choice([[2**62, 1], [0, 1], [-1], [1, 1, 1], "x",
                                                  [128, 128]])}
        what = "dequantize"
    elif kind == 5:  # written as text: the harness's own json would recurse too deep
        depth = rng.choice([40, 500, 5000])
        nested = "[" * depth + "1" + "]" * depth
        doc.pop("description", None)
        if rng.random() < 0.5:
            return json.dumps(doc)[:-1] + f', "description": {nested}}}', ".json", \
                f"nested {depth} deep"
        return _toml(doc) + f"description = {nested}\n", ".toml", f"nested {depth} deep"
    elif kind == 6:
        rng.shuffle(rules)
        doc["rules"] = rules + [dict(rules[0])]
        what = "duplicate rule"
    else:
        text = rng.choice(["rules = [", "\x00\x01", "[[rules]]\ntensor = '''", "a = 1\na = 2",
                           "{" * 10_000, "rules = " + "[" * 10_000])
        return text, rng.choice([".toml", ".json"]), "unreadable map"
    if rng.random() < 0.5:
        return json.dumps(doc, allow_nan=True), ".json", what
    return _toml(doc), ".toml", what


def _hostile_checkpoint(path: Path, keys, rng: random.Random) -> str:
    header = checkpoint(path, keys)
    raw = path.read_bytes()
    body = raw[8 + struct.unpack("<Q", raw[:8])[0]:]
    names = list(header)
    kind = rng.randrange(6)
    if kind == 0 and len(names) > 1:
        header[names[1]]["data_offsets"] = list(header[names[0]]["data_offsets"])
        what = "overlapping offsets"
    elif kind == 1:
        header[rng.choice(names)]["data_offsets"] = [0, 2**62]
        what = "offsets past the file"
    elif kind == 2:
        header[rng.choice(names)]["dtype"] = rng.choice(["Q9", "F8_E4M3", "BOOL", "", 7])
        what = "dtype"
    elif kind == 3:
        depth = rng.choice([100, 5000])
        text = json.dumps(header)[:-1] + ', "__metadata__": ' + '{"a": ' * depth + "1" + \
            "}" * depth + "}"
        _safetensors(path, text, body)
        return f"header nested {depth} deep"
    elif kind == 4:
        header[rng.choice(names)]["shape"] = rng.choice([[-1], [2**40, 2**40], "x", [1.5]])
        what = "shape"
    else:
        _safetensors(path, header, b"", length=rng.choice([2**60, 0, 3]))
        return "header length"
    _safetensors(path, header, body)
    return what


def map_case(n: int, tmp: Path, spec_path: Path) -> tuple[list[str], str]:
    """The command line of map case ``n`` (files written under ``tmp``): ``eval`` or ``run``
    of ``spec_path`` through a hostile map or a hostile checkpoint."""
    rng = random.Random(n)
    keys = _keys(spec_path)
    ckpt = tmp / "model.safetensors"
    doc = valid_map(keys)
    if rng.random() < 0.7:
        checkpoint(ckpt, keys)
        text, suffix, what = _hostile_map(doc, rng)
    else:
        what = "checkpoint " + _hostile_checkpoint(ckpt, keys, rng)
        text, suffix = json.dumps(doc), ".json"
    mp = tmp / f"map{suffix}"
    mp.write_text(text, encoding="utf-8", errors="surrogatepass")
    cmd = rng.choice(["eval", "run"])
    argv = [cmd, str(spec_path), "--params", str(ckpt), "--map", str(mp)]
    return argv, f"map: {what}"


__all__ = ["checkpoint", "map_case", "valid_map"]
