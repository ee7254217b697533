"""Benchmark: load + validate the bundled spec (salvaged) against bare ``json.loads``.

The reference is ``json.loads`` of the *repaired prefix*: the text up to the last complete
value with its open brackets closed (FORMAT.md's "repaired copy"), i.e. the cheapest possible
way to read what the salvaging loader recovers. Both are timed in this one run, best of 5 each;
the figure that matters is the ratio (goal: at most 10x).

    python bench/load.py
"""
from __future__ import annotations

import json
import re
import time

from ncdc.spec.loader import load_text
from ncdc.spec.validate import validate

import ncdc

_TOKEN = re.compile(r'"(?:[^"\\\x00-\x1f]|\\.)*"|[\[\]{},:]|[^\s\[\]{},:"]+|\s+|"')
_SCALAR = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?|true|false|null")


def repaired_prefix(text: str) -> str:
    """``text`` cut after its last complete value, its open containers closed: FORMAT.md's
    "repaired copy". A plain token scan, written for this benchmark (not the loader)."""
    closers: list[str] = []      # one per open container
    want_key: list[bool] = []    # per open container: an object expecting a key next
    cut_end, cut_closers = 0, ""
    for m in _TOKEN.finditer(text):
        tok, end = m.group(0), m.end()
        if tok.isspace() or tok == ":":
            continue
        if tok in ("{", "["):
            closers.append("}" if tok == "{" else "]")
            want_key.append(tok == "{")
        elif tok in ("}", "]"):
            if not closers:
                break
            closers.pop()
            want_key.pop()
        elif tok == ",":
            if want_key:
                want_key[-1] = closers[-1] == "}"
            continue
        elif tok.startswith('"'):
            if len(tok) == 1 or not tok.endswith('"'):
                break                                  # a string cut by the end
            if want_key and want_key[-1]:
                want_key[-1] = False                   # a key: not a value
                continue
        elif not _SCALAR.fullmatch(tok):
            break
        cut_end, cut_closers = end, "".join(reversed(closers))
    return text[:cut_end] + cut_closers


def best_of(n: int, *fns) -> list[float]:
    """Best time of each function over ``n`` rounds, the functions interleaved within a round
    (so a busy moment of the machine hits all of them alike)."""
    best = [float("inf")] * len(fns)
    for _ in range(n):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def main() -> None:
    path = ncdc.bundled_spec_path()
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    repaired = repaired_prefix(text)
    json.loads(repaired)                          # it is valid JSON

    def load_and_validate():
        doc = load_text(text, path, salvage=True)
        diags = validate(doc)
        assert not [d for d in diags if d.severity == "error"]

    def load_only():
        load_text(text, path, salvage=True)

    load_and_validate()                           # warm imports and caches
    t_json, t_load, t_all = best_of(5, lambda: json.loads(repaired), load_only,
                                    load_and_validate)
    print(f"text: {len(text):,} chars; repaired prefix: {len(repaired):,} chars")
    print(f"json.loads(repaired prefix): {t_json * 1e3:8.1f} ms")
    print(f"ncdc load (salvage)        : {t_load * 1e3:8.1f} ms  ({t_load / t_json:.1f}x)")
    print(f"ncdc load + validate       : {t_all * 1e3:8.1f} ms  ({t_all / t_json:.1f}x)")
    verdict = "within" if t_all / t_json <= 10 else "OVER"
    print(f"ratio {t_all / t_json:.1f}x: {verdict} the 10x goal")


if __name__ == "__main__":
    main()
