"""Benchmark: load + validate the bundled spec (salvaged) against bare ``json.loads``.

The reference is ``json.loads`` of the *repaired prefix*: the text up to the last complete
value with its open brackets closed (docs/format.md's "repaired copy"), i.e. the cheapest possible
way to read what the salvaging loader recovers. Both are timed in this one run, interleaved
over 15 rounds, in CPU time of the process (``time.process_time``: loading is pure Python on one
thread, and on a shared machine wall times swing with the load); figures are min / median and
the ratio of the minima (goal: at most 5x). The
script runs twice, in fresh processes, and prints one table: BLAS/OpenMP pinned to one thread
(first column; loading is pure Python, so the two should agree), the default thread count
(second column). ``--threads 1|default`` runs one of them.

    python bench/load.py
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

ROUNDS = 15  # a minimum over fewer rounds swung by 10-20% on a shared machine
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
if "--threads" in sys.argv and sys.argv[sys.argv.index("--threads") + 1:][:1] == ["1"]:
    for _var in THREAD_VARS:                      # before numpy loads its BLAS
        os.environ[_var] = "1"

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import ncdc
from ncdc.spec.loader import load_text
from ncdc.spec.validate import validate

_TOKEN = re.compile(r'"(?:[^"\\\x00-\x1f]|\\.)*"|[\[\]{},:]|[^\s\[\]{},:"]+|\s+|"')
_SCALAR = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?|true|false|null")


def repaired_prefix(text: str) -> str:
    """``text`` cut after its last complete value, its open containers closed: docs/format.md's
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


def timed(n: int, *fns) -> list[tuple[float, float]]:
    """(min, median) seconds of each function over ``n`` rounds, the functions interleaved
    within a round (so a busy moment of the machine hits all of them alike)."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(n):
        for i, fn in enumerate(fns):
            t0 = time.process_time()
            fn()
            times[i].append(time.process_time() - t0)
    return [(min(t), sorted(t)[len(t) // 2]) for t in times]


def measure() -> list[list[str]]:
    """Rows ``[label, text]`` of this run."""
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
    t_json, t_load, t_all = timed(ROUNDS, lambda: json.loads(repaired), load_only,
                                  load_and_validate)

    def ms(t):
        return f"{t[0] * 1e3:.1f} / {t[1] * 1e3:.1f} ms"

    ratio = t_all[0] / t_json[0]
    return [[f"text {len(text):,} chars; repaired prefix {len(repaired):,}", ""],
            ["json.loads(repaired prefix)", ms(t_json)],
            ["ncdc load (salvage)", f"{ms(t_load)} ({t_load[0] / t_json[0]:.1f}x)"],
            ["ncdc load + validate", f"{ms(t_all)} ({ratio:.1f}x)"],
            ["goal: load + validate <= 5x json.loads",
             "within" if ratio <= 5 else "OVER"]]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", choices=("1", "default"))
    args = ap.parse_args(argv)
    if args.threads:
        print(json.dumps(measure()))
        return
    cols = {}
    for threads in ("1", "default"):
        env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--threads", threads],
                             env=env, check=True, capture_output=True, text=True).stdout
        label = "1 thread" if threads == "1" else f"default ({os.cpu_count()} CPUs)"
        cols[label] = json.loads(out.strip().splitlines()[-1])
    names = list(cols)
    first = cols[names[0]]
    width = max(len(r[0]) for r in first) + 2
    col = max(len(r[1]) for rows in cols.values() for r in rows) + 2
    print(f"figures: CPU time, min / median of {ROUNDS} interleaved rounds; ratios of the minima")
    print(f"{'':{width}s}" + "".join(f"{n:{col}s}" for n in names))
    for i, (label, _t) in enumerate(first):
        print(f"{label:{width}s}" + "".join(f"{cols[n][i][1]:{col}s}" for n in names))


if __name__ == "__main__":
    main()
