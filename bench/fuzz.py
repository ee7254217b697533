"""Fuzz campaign: hostile specs, sizes, names, command lines, checkpoint maps and weight files
against every public entry point: the CLI's commands and the Python API.

Every case is one ``ncdc`` command line run in-process (``ncdc.cli.main``), or one call of the
public API (``ncdc.load``, ``Spec.validate/bind/blocks/params``, ``ncdc.interpret`` and a run,
``ncdc.compile_torch``), by a recycled worker process, under limits:

* CPU: a per-case profiling timer (``ITIMER_PROF``, 2 s; 10 s for the bundled spec) raises
  inside the case — a *hang*;
  a case stuck in C code past 30 s of wall time gets its worker killed — also a hang;
* memory: ``RLIMIT_AS`` = the worker's footprint after warm-up + 2 GiB — a ``MemoryError``
  (or the CLI's "out of memory" line) is a *run over 2 GB*;
* anything escaping ``main`` other than ``SystemExit`` (through the API: anything but a
  ``SpecError``) is an *untyped exception*, grouped by type and site (innermost ncdc frame); a
  traceback printed is one too.

Cases (derived from the case number alone, so any case can be replayed with ``--case N``):
mutations of every spec the tests use and of the bundled spec (hostile numerics in sizes,
repetitions, strides and indices; hostile names and titles; deleted, emptied, retyped and
duplicated fields; truncation), hostile ``--size``/``--seed``/``--seeds``/path flags, hostile
``.npz``/``.safetensors`` files for ``--params``/``--inputs``/``--tape``, and (``--maps``)
hostile checkpoint maps and checkpoints for ``eval``/``run --map`` (``bench/fuzz_maps.py``).
``--view N`` then opens the ``ncdc view`` pages of N mutated specs in headless Chromium
(``bench/fuzz_view.py``).

    python bench/fuzz.py                 # 10,000 cases + 300 map cases + 50 pages, 2 workers
    python bench/fuzz.py -n 200 -j 1     # a quick run
    python bench/fuzz.py --case 1234 -v  # replay one case, printing its output
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import io
import json
import multiprocessing as mp
import os
import random
import re
import resource
import signal
import struct
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's ncdc, not an installed one
SPECS = sorted([*ROOT.glob("tests/data/*.json"), *ROOT.glob("tests/data/pyncd/*.json"),
                *(ROOT.parent / "shared" / "specs" / "pyncd").glob("*.json")])
BUNDLED = ROOT / "ncdc" / "data" / "deepseek_v41_flash.json"
BUNDLED_SHARE = 0.04
"""The share of spec cases that mutate the bundled spec (1.9 MB) instead of a small one."""
MAP_SPEC = ROOT / "tests" / "data" / "pyncd" / "transformer.json"
MAP_BASE = 10**9
"""Case numbers from here on are map cases (``bench/fuzz_maps.py``)."""
CPU_LIMIT_S = 2.0
BUNDLED_CPU_LIMIT_S = 10.0
WALL_LIMIT_S = 30.0
MEMORY_LIMIT = 2 << 30
RECYCLE = 1000

HOSTILE_INTS = [-1, -3, 0, 1, 2**31, 10**12, 2**63 - 1, 2**63, 2**70, -2**63, 10**30]
HOSTILE_NAMES = ["super", "range", "None", "ValueError", "F", "torch", "nn", "math",
                 "functools", "self", "class", "lambda", "\u03b1", "\u00e9", "\ud800", "",
                 " ", "a b", "x" * 100_000, "__init__", "0abc", "'\"\\", "\n", "{}", "T_1",
                 "import os", "k", "\\text{F}", "x.y", "a/b", "@0", "~1"]


# --------------------------------------------------------------------------- case generation


def _I(v):
    return {"__type__": "Integer", "_value": v}


def hostile_numeric(rng: random.Random):
    kind = rng.randrange(9)
    if kind == 0:
        return _I(rng.choice(HOSTILE_INTS))
    if kind == 1:
        return {"__type__": "Power", "base": _I(rng.choice([2, 3, 10, -2])),
                "exponent": _I(rng.choice([63, 64, 2**63, 10**30, -5, 10**6]))}
    if kind == 2:
        return {"__type__": "SquareRoot", "argument": _I(rng.choice([2, -4, 4, 10**40]))}
    if kind == 3:
        return {"__type__": "Constant", "symbol": rng.choice(["PI", "EULER", "INFINITY",
                                                                "IMAGINARY_UNIT"])}
    if kind == 4:
        return {"__type__": "Multiplication", "content": [_I(10**300)] * rng.randrange(1, 30)}
    if kind == 5:
        return _I(10 ** rng.choice([4000, 5000, 20000]) - 1)
    if kind == 6:
        return {"__type__": "Logarithm", "base": _I(rng.choice([0, 1, 2])),
                "argument": _I(rng.choice([0, -1, 8]))}
    if kind == 7:
        return rng.choice([1.5, float("nan"), "x", None, [], {}, True])
    return {"__type__": "Addition", "content": [_I(2**62), _I(2**62), _I(rng.choice([0, 1]))]}


def _nodes(value, path=()):
    out = [(path, value)]
    stack = [(path, value)]
    while stack:
        p, v = stack.pop()
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) \
            else ()
        for k, c in items:
            out.append((p + (k,), c))
            stack.append((p + (k,), c))
    return out


def _set(doc, path, value):
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value


def _delete(doc, path):
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    if isinstance(cur, dict):
        cur.pop(path[-1], None)
    elif isinstance(cur, list) and path[-1] < len(cur):
        cur.pop(path[-1])


def mutate(doc, rng: random.Random) -> tuple[object, str]:
    """One hostile mutation of a spec document (a copy) and what it did."""
    doc = copy.deepcopy(doc)
    nodes = _nodes(doc)
    kind = rng.randrange(10)
    if kind <= 2:  # a hostile numeric where a numeric is
        cands = [p for p, v in nodes if isinstance(v, dict) and v.get("__type__") in
                 ("Integer", "Power", "Multiplication", "Addition") and p] or \
            [p for p, v in nodes if p]
        p = rng.choice(cands)
        _set(doc, p, hostile_numeric(rng))
        return doc, f"numeric at {p}"
    if kind == 3:  # repetition / mapping / stride fields
        cands = [p for p, v in nodes if p and p[-1] in ("repetition", "mapping", "_cod_stride",
                                                        "_cod_stride_shift", "_value")]
        if cands:
            p = rng.choice(cands)
            val = rng.choice([hostile_numeric(rng), [-1], [0, 0, 0, 9], [], [2**63]])
            _set(doc, p, val)
            return doc, f"field at {p}"
    if kind == 4:  # hostile names in every string
        cands = [p for p, v in nodes if isinstance(v, str) and p and p[-1] in
                 ("body", "title", "name", "_name", "code_form", "description", "symbol")]
        if cands:
            for p in rng.sample(cands, min(len(cands), rng.randrange(1, 4))):
                _set(doc, p, rng.choice(HOSTILE_NAMES))
            return doc, "names"
    if kind == 5:  # delete a field
        p = rng.choice([p for p, _ in nodes if p])
        _delete(doc, p)
        return doc, f"delete {p}"
    if kind == 6:  # empty a list / object
        cands = [p for p, v in nodes if p and isinstance(v, (list, dict)) and v]
        p = rng.choice(cands)
        _set(doc, p, [] if isinstance(rng.choice([[], {}]), list) else {})
        return doc, f"empty {p}"
    if kind == 7:  # retype
        cands = [p for p, v in nodes if p and p[-1] == "__type__"]
        p = rng.choice(cands)
        _set(doc, p, rng.choice(["Integer", "RawAxis", "Block", "Composed", "Linear", "Array",
                                 "Weave", "FreeNumeric", "Nope"]))
        return doc, f"retype {p}"
    if kind == 8:  # swap two subtrees
        a, b = rng.sample([p for p, _ in nodes if p], 2)
        try:
            va = copy.deepcopy(_get(doc, a))
            _set(doc, a, copy.deepcopy(_get(doc, b)))
            _set(doc, b, va)
        except (KeyError, IndexError, TypeError):
            pass
        return doc, f"swap {a} {b}"
    p = rng.choice([p for p, _ in nodes if p])
    _set(doc, p, rng.choice([None, 0, -1, "", [], {}, 1e308, True]))
    return doc, f"scalar at {p}"


_TEXT_SITES = {"integer": re.compile(r'"_value": -?\d+'), "name": re.compile(r'"body": "[^"]*"'),
               "title": re.compile(r'"title": "[^"]*"'),
               "mapping": re.compile(r'"mapping": \[[^\]]*\]')}


def mutate_text(text: str, rng: random.Random) -> tuple[str, str]:
    """One hostile edit of a spec's text (the bundled spec is truncated, so not a JSON value):
    a hostile number, name, title or mapping at one of its sites, a span deleted, or a cut."""
    kind = rng.choice([*_TEXT_SITES, "delete", "cut"])
    if kind == "cut":
        at = rng.randrange(len(text))
        return text[:at], f"cut at {at}"
    if kind == "delete":
        at = rng.randrange(len(text))
        return text[:at] + text[at + rng.randrange(1, 200):], f"delete at {at}"
    sites = list(_TEXT_SITES[kind].finditer(text))
    m = rng.choice(sites)
    if kind == "integer":
        value = json.dumps(rng.choice([*HOSTILE_INTS, 10**4000 - 1, 1.5]))
        new = f'"_value": {value}'
    elif kind == "mapping":
        new = f'"mapping": {json.dumps(rng.choice([[-1], [0, 0, 0, 9], [], [2**63], [99]]))}'
    else:
        new = f'"{kind if kind == "title" else "body"}": ' + json.dumps(rng.choice(HOSTILE_NAMES))
    return text[:m.start()] + new + text[m.end():], f"{kind} at offset {m.start()}"


def _load_docs(paths) -> dict:
    """Each spec's document (the bundled spec's text: it is truncated)."""
    return {Path(p): Path(p).read_text(encoding="utf-8") if Path(p) == BUNDLED
            else json.loads(Path(p).read_text(encoding="utf-8")) for p in paths}


def _get(doc, path):
    cur = doc
    for k in path:
        cur = cur[k]
    return cur


def _text(doc, rng: random.Random) -> str:
    sys.set_int_max_str_digits(0)
    text = json.dumps(doc)
    r = rng.random()
    if r < 0.08:  # truncate
        return text[:rng.randrange(len(text))]
    if r < 0.12:  # duplicate a key
        i = text.find('"__type__"', rng.randrange(len(text)))
        if i > 0:
            return text[:i] + '"__type__": "X", ' + text[i:]
    if r < 0.14:  # viewer wrapper
        return json.dumps({"msgType": "dataUpdate", "data": text})
    return text


def _labels(doc) -> list[str]:
    out = []
    for v in (doc.get("uid_repository") or {}).values():
        try:
            if v["__type__"] == "FreeNumeric":
                out.append(v["uid"]["_name"]["body"])
        except (KeyError, TypeError):
            pass
    return out or ["k"]


def _size_flags(rng: random.Random, labels: list[str]) -> list[str]:
    out = []
    for _ in range(rng.choice([0, 0, 0, 1, 1, 2])):
        name = rng.choice(labels) if rng.random() < 0.9 else rng.choice(["zz", "id:1", ""])
        val = rng.choice(["0", "1", "2", "3", "2", "3", "5", "-1", "nan", "inf", "1e400",
                          "2.5", "1e12", str(2**63), str(2**64), "x", "9" * 5000, "4.0"])
        out += ["--size", f"{name}={val}"]
    return out


def weight_file(path: Path, rng: random.Random) -> str:
    """A hostile .npz or .safetensors file at ``path`` (suffix chosen here); what it is."""
    import numpy as np

    kind = rng.randrange(9)
    if kind == 0:
        p = path.with_suffix(".npz")
        p.write_bytes(b"")
        return f"{p}|empty npz"
    if kind == 1:
        p = path.with_suffix(".npz")
        p.write_bytes(os.urandom(rng.randrange(1, 300)))
        return f"{p}|random bytes"
    if kind == 2:  # an .npy member declaring a huge shape
        p = path.with_suffix(".npz")
        hdr = "{'descr': '<f8', 'fortran_order': False, 'shape': (100000, 100000, 100), }"
        raw = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr) + 1) + hdr.encode() + b"\n"
        with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("in0.npy", raw + bytes(1 << 16))
        return f"{p}|huge declared shape"
    if kind == 3:  # malformed header
        p = path.with_suffix(".npz")
        with zipfile.ZipFile(p, "w") as zf:
            zf.writestr("in0.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': oops}\n" + b"0" * 64)
        return f"{p}|malformed header"
    if kind == 4:  # object array (pickle)
        p = path.with_suffix(".npz")
        np.savez(p, in0=np.array([{"a": 1}], dtype=object))
        return f"{p}|pickle"
    if kind == 5:  # nan / inf / complex / extra keys
        p = path.with_suffix(".npz")
        arrs = {f"in{k}": rng.choice([np.full((2, 2), np.nan), np.ones(3) * 1j, np.ones(())])
                for k in range(3)}
        arrs["extra"] = np.zeros(1)
        np.savez(p, **arrs)
        return f"{p}|nan/complex/extra"
    if kind == 6:  # BF16 / F8 safetensors
        p = path.with_suffix(".safetensors")
        dt = rng.choice(["BF16", "F8_E4M3", "F8_E5M2", "C64", "Q9"])
        n = rng.choice([4, 16])
        header = json.dumps({"w": {"dtype": dt, "shape": [n], "data_offsets": [0, n * 2]},
                             "__metadata__": {"ncdc.quant": "x"}}).encode()
        p.write_bytes(struct.pack("<Q", len(header)) + header + bytes(n * 2))
        return f"{p}|safetensors {dt}"
    if kind == 7:  # lying safetensors header
        p = path.with_suffix(".safetensors")
        header = json.dumps({"w": {"dtype": "F64", "shape": [10**12],
                                   "data_offsets": [0, 8 * 10**12]}}).encode()
        p.write_bytes(struct.pack("<Q", rng.choice([len(header), 2**60])) + header)
        return f"{p}|lying safetensors"
    p = path.with_suffix(".npz")
    with zipfile.ZipFile(p, "w") as zf:  # a zip bomb-ish member: 64 MiB of zeros
        zf.writestr(zipfile.ZipInfo("in0.npy"), b"\x93NUMPY\x01\x00" + struct.pack(
            "<H", 70) + b"{'descr': '<f8', 'fortran_order': False, 'shape': (8388608,), }"
            .ljust(69) + b"\n" + bytes(8 << 20), compress_type=zipfile.ZIP_DEFLATED)
    return f"{p}|zip bomb"


def _eval_flags(rng: random.Random, tmp: Path, kind: float) -> list[str]:
    """Hostile weight files and output flags of an ``eval`` case."""
    argv: list[str] = []
    if kind >= 0.70 and rng.random() < 0.6:
        flag = rng.choice(["--params", "--inputs", "--tape"])
        desc = weight_file(tmp / "w", rng)
        argv += [flag, desc.split("|")[0]]  # the file's name says what it is
    if rng.random() < 0.2:
        argv += ["--seed", rng.choice(["-1", "0", "7", str(2**70)])]
    if rng.random() < 0.2:
        argv += ["--out", str(tmp / rng.choice(["o.npz", "o.txt", "missing/o.npz", ""]))]
    if rng.random() < 0.2:
        argv += ["--save-params", str(tmp / rng.choice(["p.npz", "p.safetensors", "p.pt"]))]
    if rng.random() < 0.1:
        argv += ["--strict"]
    return argv


def _flags(cmd: str, rng: random.Random, tmp: Path, doc, kind: float, bundled: bool
           ) -> list[str]:
    """The flags of a ``cmd`` case (hostile ones among them)."""
    argv: list[str] = []
    if bundled and cmd in ("check", "run"):
        argv += ["--block", rng.choice(["Sliding Window Layer", "Mixture of Experts"])]
    if cmd == "view":
        argv += ["-o", str(tmp / rng.choice(["v.html", "nodir/v.html"]))]
    if cmd == "run":
        argv += ["--params", "synthetic"] + _size_flags(rng, _labels(doc))
        if rng.random() < 0.2:
            argv += ["--dtype", rng.choice(["float64", "bfloat16"])]
    if cmd == "graph":
        argv += ["-o", str(tmp / rng.choice(["g.dot", "g.graphml", "g.txt", "nodir/g.dot"]))]
    if cmd in ("eval", "compile", "check", "show", "params", "validate"):
        argv += _size_flags(rng, _labels(doc))
        if rng.random() < 0.15:
            argv += ["--preset", rng.choice(["tiny", "released", "medium", "nope"])]
    if cmd == "eval":
        argv += _eval_flags(rng, tmp, kind)
    if cmd == "compile" and rng.random() < 0.5:
        argv += ["-o", str(tmp / rng.choice(["m.py", "m.txt", "nodir/m.py", "."]))]
    if cmd == "export":
        argv += ["--hf", str(tmp / rng.choice(["hf", "nodir/hf", "."]))]
        argv += _size_flags(rng, _labels(doc))
    if cmd == "check":
        argv += ["--seeds", rng.choice(["0", "1", "-2", "1"])]
    if rng.random() < 0.05:
        argv += ["--max-spec-bytes", rng.choice(["0", "-1", "100"])]
    return argv


def make_case(n: int, tmp: Path, docs: dict) -> tuple[list[str], str]:
    """The command line of case ``n`` (files written under ``tmp``) and a description."""
    sys.set_int_max_str_digits(0)  # the harness writes long literals; ncdc must refuse them
    if n >= MAP_BASE:
        from bench.fuzz_maps import map_case

        return map_case(n, tmp, MAP_SPEC)
    rng = random.Random(n)
    spec_path = BUNDLED if rng.random() < BUNDLED_SHARE else rng.choice(SPECS)
    doc = docs[spec_path]
    kind = rng.random()
    target = tmp / "spec.json"
    what = spec_path.name
    if isinstance(doc, str):  # the bundled spec, truncated as delivered: text mutations
        text, how = mutate_text(doc, rng) if kind < 0.70 else (doc, "as delivered")
        target.write_text(text, encoding="utf-8", errors="surrogatepass")
        what += f": {how}"
        doc = {}
    elif kind < 0.70:
        mutated, how = mutate(doc, rng)
        if rng.random() < 0.3:
            mutated, how2 = mutate(mutated, rng)
            how += "; " + how2
        target.write_text(_text(mutated, rng), encoding="utf-8", errors="surrogatepass")
        what += f": {how}"
    else:
        target.write_text(json.dumps(doc), encoding="utf-8")
    cmd = rng.choices(["validate", "show", "blocks", "params", "graph", "eval", "compile",
                       "check", "cost", "view", "run", "api"],
                      weights=[14, 8, 4, 8, 4, 18, 8, 3, 4, 4, 5, 20])[0]
    if cmd == "compile" and rng.random() < 0.25:  # a quarter of the code-generation cases
        cmd = "export"
    if cmd == "api":
        sizes = _size_flags(rng, _labels(doc))
        return ["api", rng.choice(API_CALLS), str(target), *sizes], what
    argv = [cmd, str(target)] + _flags(cmd, rng, tmp, doc, kind, spec_path == BUNDLED)
    return argv, what


# --------------------------------------------------------------------------- API cases

API_CALLS = ["load", "validate", "blocks", "params", "interpret", "interpret-block",
             "compile_torch"]


def _api_sizes(flags: list[str]) -> dict:
    """``--size name=value`` flags as the API's ``sizes`` mapping (ints, else floats)."""
    out: dict = {}
    for flag in flags[1::2]:
        name, _, text = flag.partition("=")
        try:
            out[name] = int(text)
        except ValueError:
            try:
                out[name] = float(text)
            except ValueError:
                out[name] = text
    return out


def api_case(argv: list[str]) -> None:
    """One public API call of an ``["api", call, spec, *size flags]`` case; a SpecError is
    typed (the caller catches it)."""
    import ncdc

    call, path, sizes = argv[1], argv[2], _api_sizes(argv[3:])
    spec = ncdc.load(path, salvage=len(path) % 2 == 0)
    if call == "load":
        return
    if call == "validate":
        spec.validate()
        spec.validate(spec.bind("tiny", sizes))
    elif call == "blocks":
        for site in spec.blocks():
            spec.label(site)
        spec.size_names()
    elif call == "params":
        spec.params(binding=spec.bind("tiny", sizes), collapse=64)
    elif call in ("interpret", "interpret-block"):
        from ncdc.interpreter import random_inputs

        what = spec if call == "interpret" or not spec.blocks() else spec.blocks()[-1].path
        run = ncdc.interpret(what, spec=spec if isinstance(what, str) else None, sizes=sizes,
                             stand_in=True)
        run(*random_inputs(run.morphism, run.env, 0))
    else:
        ncdc.compile_torch(spec, sizes=sizes, dtype="float32")


# --------------------------------------------------------------------------- running one case


class Hang(BaseException):
    """Raised by the CPU timer inside a case that ran past its limit."""


def _on_timer(signum, frame):
    raise Hang()


def _site(tb) -> str:
    frames = traceback.extract_tb(tb)
    mine = [f for f in frames if "/wt-" in f.filename or "/ncdc" in f.filename
            or str(ROOT) in f.filename]
    f = (mine or frames)[-1] if frames else None
    if f is None:
        return "?"
    return f"{os.path.relpath(f.filename, ROOT)}:{f.lineno} ({f.name})"


def run_case(n: int, docs: dict, verbose: bool = False) -> dict:
    from ncdc.cli import main
    from ncdc.ir.errors import SpecError

    with tempfile.TemporaryDirectory(prefix="ncdc-fuzz-") as d:
        tmp = Path(d)
        argv, what = make_case(n, tmp, docs)
        out, err = io.StringIO(), io.StringIO()
        limit = BUNDLED_CPU_LIMIT_S if str(BUNDLED) in argv[:3] or \
            what.startswith(BUNDLED.name) else CPU_LIMIT_S
        res = {"case": n, "what": what, "argv": argv, "kind": "ok", "limit": limit}
        t0 = time.process_time()
        signal.setitimer(signal.ITIMER_PROF, limit)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                if argv[0] == "api":
                    try:
                        api_case(argv)
                        rc = 0
                    except SpecError:
                        rc = 1
                else:
                    rc = main(argv)
            res["rc"] = rc
        except Hang:
            res["kind"] = "hang"
            res["site"] = _site(sys.exc_info()[2])
            res["stack"] = [f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                            for f in traceback.extract_tb(sys.exc_info()[2])][-12:]
        except SystemExit as exc:
            res["rc"] = exc.code
        except MemoryError:
            res["kind"] = "memory"
            res["site"] = _site(sys.exc_info()[2])
        except BaseException as exc:  # noqa: BLE001 - what the campaign counts
            res["kind"] = "untyped"
            res["type"] = type(exc).__name__
            res["site"] = _site(exc.__traceback__)
            res["message"] = str(exc)[:200]
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        res["cpu"] = time.process_time() - t0
        text = out.getvalue() + err.getvalue()
        res["first_error"] = next((ln[:70] for ln in err.getvalue().splitlines()
                                   if ln.startswith("error")), "")
        if res["kind"] == "ok":
            if "out of memory" in text:
                res["kind"] = "refused-allocation"
                res["site"] = "MemoryError caught at the CLI boundary"
            elif "Traceback" in text:
                res["kind"] = "untyped"
                res["type"] = "traceback"
                line = next((ln for ln in text.splitlines() if "Error" in ln), "")
                res["site"] = line[:160]
        if verbose:
            print(" ".join(a[:80] for a in argv), "\n", what[:300], "\n", text[-3000:])
        return res


# --------------------------------------------------------------------------- worker pool


def _worker(conn, docs_paths):
    docs = _load_docs(docs_paths)
    import numpy  # noqa: F401
    import torch  # noqa: F401

    import ncdc.cli  # noqa: F401 - warm imports before fixing the memory limit

    with open("/proc/self/statm") as fh:
        vm = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (vm + MEMORY_LIMIT, resource.RLIM_INFINITY))
    signal.signal(signal.SIGPROF, _on_timer)
    conn.send("ready")
    while True:
        n = conn.recv()
        if n is None:
            return
        try:
            res = run_case(n, docs)
        except BaseException as exc:  # noqa: BLE001 - a harness-level failure, reported
            res = {"case": n, "kind": "untyped", "type": type(exc).__name__,
                   "site": "harness: " + _site(exc.__traceback__), "what": "", "argv": []}
        conn.send(res)


class Slot:
    def __init__(self, ctx, paths):
        self.parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, paths), daemon=True)
        self.proc.start()
        if not self.parent.poll(120) or self.parent.recv() != "ready":
            raise RuntimeError("a fuzz worker did not start")
        self.done = 0
        self.case = None
        self.since = 0.0

    def kill(self):
        self.proc.kill()
        self.proc.join()


def campaign(cases: list[int], jobs: int) -> list[dict]:
    ctx = mp.get_context("fork")
    paths = [str(p) for p in (*SPECS, BUNDLED)]
    slots = [Slot(ctx, paths) for _ in range(jobs)]
    todo = collections.deque(cases)
    results = []
    t0 = time.time()
    while todo or any(s.case is not None for s in slots):
        for i, s in enumerate(slots):
            if s.case is None and todo:
                if s.done >= RECYCLE:
                    s.parent.send(None)
                    s.proc.join(5)
                    s.kill()
                    slots[i] = s = Slot(ctx, paths)
                s.case = todo.popleft()
                s.since = time.time()
                s.parent.send(s.case)
        for i, s in enumerate(slots):
            if s.case is None:
                continue
            if s.parent.poll(0.01):
                try:
                    results.append(s.parent.recv())
                except EOFError:
                    results.append({"case": s.case, "kind": "crash", "site": "worker died",
                                    "what": "", "argv": []})
                    s.kill()
                    slots[i] = Slot(ctx, paths)
                    continue
                s.case = None
                s.done += 1
            elif not s.proc.is_alive() or time.time() - s.since > WALL_LIMIT_S:
                kind = "hang" if s.proc.is_alive() else "crash"
                results.append({"case": s.case, "kind": kind, "site": "killed by the harness",
                                "what": "", "argv": []})
                s.kill()
                slots[i] = Slot(ctx, paths)
        if len(results) and len(results) % 500 == 0 and results[-1].get("_printed") is None:
            results[-1]["_printed"] = True
            print(f"  {len(results)} cases, {time.time() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    for s in slots:
        s.parent.send(None)
        s.proc.join(5)
        if s.proc.is_alive():
            s.kill()
    return results


def report(results: list[dict], took: float) -> int:
    kinds = collections.Counter(r["kind"] for r in results)
    slow = [r for r in results if r.get("cpu", 0) > r.get("limit", CPU_LIMIT_S)
            and r["kind"] == "ok"]
    print(f"cases: {len(results)} in {took:.0f} s "
          f"({len(results) / max(took, 1e-9):.1f}/s)")
    print(f"untyped exceptions: {kinds['untyped']}")
    by = collections.Counter((r.get("type"), r.get("site")) for r in results
                             if r["kind"] == "untyped")
    for (t, site), c in by.most_common(30):
        ex = next(r for r in results if r["kind"] == "untyped" and r.get("type") == t
                  and r.get("site") == site)
        print(f"  {c:5d}  {t} at {site}  (e.g. case {ex['case']}: {ex.get('message', '')[:90]!r})")
    print(f"hangs over {CPU_LIMIT_S:g} s CPU ({BUNDLED_CPU_LIMIT_S:g} s for the bundled spec): "
          f"{kinds['hang'] + len(slow)}")
    for r in [r for r in results if r["kind"] == "hang"][:10] + slow[:10]:
        print(f"  case {r['case']}: {r.get('site')} {r.get('what', '')[:120]}")
    print(f"runs over {MEMORY_LIMIT >> 30} GB: {kinds['memory']}")
    for r in [r for r in results if r["kind"] == "memory"][:10]:
        print(f"  case {r['case']}: {r.get('site')} {r.get('what', '')[:120]}")
    print(f"worker crashes: {kinds['crash']}")
    print(f"allocations numpy refused (MemoryError caught at the CLI boundary, one line, exit "
          f"1; nothing allocated): {kinds['refused-allocation']}")
    for r in [r for r in results if r["kind"] == "refused-allocation"][:5]:
        print(f"  case {r['case']}: {' '.join(a[:40] for a in r.get('argv', [])[2:])} "
              f"{r.get('what', '')[:100]}")
    per = collections.defaultdict(list)
    for r in results:
        if r.get("argv"):
            per[r["argv"][0]].append(r.get("cpu", 0.0))
    print("CPU per case by command (mean s): " + ", ".join(
        f"{k} {sum(v) / len(v):.2f} ({len(v)})" for k, v in sorted(per.items())))
    if os.environ.get("NCDC_FUZZ_REASONS"):
        import re

        why = collections.Counter(re.sub(r"'[^']*'|\d+", "_", r.get("first_error", ""))[:50]
                                  for r in results if r["kind"] == "ok")
        for k, v in why.most_common(15):
            print(f"  {v:5d} {k}")
    rcs = collections.Counter(r.get("rc") for r in results if r["kind"] == "ok")
    print("exit statuses of the typed runs: " + ", ".join(f"{k}: {v}" for k, v in
                                                            sorted(rcs.items(), key=str)))
    bad = kinds["untyped"] + kinds["hang"] + kinds["memory"] + kinds["crash"] + len(slow)
    return 1 if bad else 0


def view_report(found: dict) -> int:
    c = found["counts"]
    print(f"view pages: {sum(c.values())} mutated specs; {c.get('written', 0)} pages written, "
          f"{c.get('refused', 0)} refused typed; in Chromium: {c.get('page error', 0)} page "
          f"errors, {c.get('blank', 0)} blank, {c.get('not ready', 0)} never ready; untyped: "
          f"{c.get('untyped', 0)}")
    for kind, rows in found["examples"].items():
        for n, what, detail in rows:
            print(f"  {kind}: case {n}: {what[:80]} -- {detail}")
    bad = sum(c.get(k, 0) for k in ("page error", "blank", "not ready", "untyped"))
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--cases", type=int, default=10_000)
    ap.add_argument("--maps", type=int, default=300, help="hostile map/checkpoint cases")
    ap.add_argument("--view", type=int, default=50, help="mutated specs viewed in Chromium")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--case", type=int, default=None, help="replay one case in this process")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.case is not None:
        import torch  # noqa: F401

        import ncdc.cli  # noqa: F401 - warm imports, as the workers do

        signal.signal(signal.SIGPROF, _on_timer)
        docs = _load_docs((*SPECS, BUNDLED))
        print(json.dumps(run_case(args.case, docs, verbose=True), default=str)[:2000])
        return 0
    t0 = time.time()
    cases = list(range(args.start, args.start + args.cases)) + \
        list(range(MAP_BASE + args.start, MAP_BASE + args.start + args.maps))
    results = campaign(cases, args.jobs)
    status = report(results, time.time() - t0)
    maps = [r for r in results if r["case"] >= MAP_BASE]
    print(f"map/checkpoint cases: {len(maps)}, untyped "
          f"{sum(r['kind'] == 'untyped' for r in maps)}, hangs "
          f"{sum(r['kind'] == 'hang' for r in maps)}")
    if args.view:
        from bench.fuzz_view import view_campaign

        docs = _load_docs((*SPECS, BUNDLED))
        with tempfile.TemporaryDirectory(prefix="ncdc-fuzz-view-") as d:
            found = view_campaign(range(args.start, args.start + args.view), docs,
                                  [*SPECS, BUNDLED], Path(d))
        status |= view_report(found)
    return status


if __name__ == "__main__":
    sys.exit(main())
