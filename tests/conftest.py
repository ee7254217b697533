"""Shared fixtures: the bundled spec (salvaged), the two older pyncd examples (each loaded once
per process, :func:`loaded`), their raw JSON, and :class:`SpecMaker`, a small builder of
hand-made spec JSON for tests.

Tiers: ``pytest`` runs everything but the exhaustive tests; ``pytest -m "not slow"`` leaves out
the tests marked ``slow`` (the heavy ones, minutes between them) for a quick pass;
``NCDC_SLOW_TESTS=1`` adds the exhaustive tests (:data:`exhaustive`: export and compile of
every block), which are marked ``slow`` too. Under ``CI`` (``CI=true``, as ``.ci/run`` sets it)
a browser test of ``ncdc view`` that would skip (no Chromium, no playwright) fails instead.
"""
from __future__ import annotations

import copy
import functools
import importlib
import json
import os
import sys
from pathlib import Path
from typing import ClassVar

import pytest

import ncdc

# inductor compiles in this process: a pool of compile workers (one per core) would import torch
# in each and compete with pytest-xdist's workers for the same two cores
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

DATA = Path(__file__).resolve().parent / "data"
PYNCD = DATA / "pyncd"
"""Copies of the two older-generation pyncd exports delivered in shared/specs/pyncd."""
TRANSFORMER = PYNCD / "transformer.json"
ATTENTION_CORE = PYNCD / "attention_core.json"


def _import_unrewritten(*names: str) -> None:
    """Import ``names`` past pytest's assertion rewriter. pytest rewrites the asserts of every
    package of a distribution that carries a pytest plugin, hypothesis included: without
    bytecode (``PYTHONDONTWRITEBYTECODE``, a fresh clone) that costs every test process about a
    second of collection for asserts that are hypothesis's own, not the tests'."""
    hooks = [h for h in sys.meta_path if type(h).__name__ == "AssertionRewritingHook"]
    for hook in hooks:
        sys.meta_path.remove(hook)
    try:
        for name in names:
            importlib.import_module(name)
    finally:
        sys.meta_path[:0] = hooks


_import_unrewritten("hypothesis", "hypothesis.strategies")

SLOW_TESTS = os.environ.get("NCDC_SLOW_TESTS", "") not in ("", "0")
EXHAUSTIVE = (pytest.mark.slow,
              pytest.mark.skipif(not SLOW_TESTS, reason="exhaustive: set NCDC_SLOW_TESTS=1"))
"""The marks of a test or parameter that runs only with ``NCDC_SLOW_TESTS=1``."""


def exhaustive(test):
    """Decorator: ``test`` carries :data:`EXHAUSTIVE`."""
    for mark in EXHAUSTIVE:
        test = mark(test)
    return test


@functools.cache
def _load(path: Path | None):
    return ncdc.load() if path is None else ncdc.load(path)


def loaded(path=None):
    """``ncdc.load(path)`` (the bundled spec, salvaged, without ``path``), once per process:
    specs are immutable, so every test and every parametrization shares one."""
    return _load(None if path is None else Path(path).resolve())


@pytest.fixture(scope="session")
def bundled():
    """``ncdc.load()``: the bundled DeepSeek spec, salvaged."""
    return loaded()


@pytest.fixture(scope="session")
def bundled_text():
    with open(ncdc.bundled_spec_path(), encoding="utf-8") as fh:
        return fh.read()


@pytest.fixture(scope="session")
def transformer():
    return loaded(TRANSFORMER)


@pytest.fixture(scope="session")
def attention_core():
    return loaded(ATTENTION_CORE)


@pytest.fixture(scope="session")
def _attention_core_json():
    return json.loads(ATTENTION_CORE.read_text(encoding="utf-8"))


@pytest.fixture
def attention_core_json(_attention_core_json):
    """A fresh (mutable) copy of attention_core.json's document."""
    return copy.deepcopy(_attention_core_json)


@pytest.fixture(scope="session")
def _transformer_json():
    return json.loads(TRANSFORMER.read_text(encoding="utf-8"))


@pytest.fixture
def transformer_json(_transformer_json):
    return copy.deepcopy(_transformer_json)


def json_nodes(value, path=""):
    """Every (path, value) of a JSON document, paths written like the loader's
    (``data.content[2].body``)."""
    out = [(path, value)]
    stack = [(path, value)]
    while stack:
        p, v = stack.pop()
        if isinstance(v, dict):
            items = [(f"{p}.{k}" if p else k, c) for k, c in v.items()]
        elif isinstance(v, list):
            items = [(f"{p}[{i}]", c) for i, c in enumerate(v)]
        else:
            items = []
        for item in items:
            out.append(item)
            stack.append(item)
    return out


def find_typed(doc, type_name: str, under: str = "data"):
    """(path, object) of every ``{"__type__": type_name}`` below ``under``, in path order."""
    return sorted(((p, v) for p, v in json_nodes(doc) if isinstance(v, dict)
                   and v.get("__type__") == type_name and p.startswith(under)),
                  key=lambda pv: pv[0])


class SpecMaker:
    """Builds spec JSON by hand: repository records (axes, symbols, tags, slots) and inline
    terms. ``doc(data)`` gives the plain document."""

    TILED: ClassVar[dict] = {"__registered__": "enum", "type": "WeaveMode", "name": "TILED"}

    def __init__(self):
        self.repo: dict[str, dict] = {}
        self._next = 1000

    def _uid(self, kind, name=None, exponent=None):
        self._next += 1
        nm = None
        if name is not None:
            nm = {"__type__": "DynamicName", "body": name, "subscript": None, "settings": None,
                  "code_form": None,
                  "exponent": None if exponent is None else
                  {"__type__": "DynamicName", "body": str(exponent), "subscript": None,
                   "settings": None, "code_form": None, "exponent": None}}
        return self._next, {"__type__": "UID", "_type": {"__registered__": "type", "repr": kind},
                            "_id": self._next, "_name": nm}

    def ref(self, uid):
        return {"__ref__": uid}

    @staticmethod
    def int(v):
        return {"__type__": "Integer", "_value": v}

    def symbol(self, name, default=None):
        uid, u = self._uid("FreeNumeric", name, default)
        self.repo[str(uid)] = {"__type__": "FreeNumeric", "uid": u}
        return uid

    def axis(self, name, size, kind="RawAxis", **extra):
        uid, u = self._uid(kind, name)
        rec = {"__type__": kind, "uid": u,
               "_size": size if isinstance(size, dict) else self.int(size)}
        rec.update(extra)
        self.repo[str(uid)] = rec
        return uid

    def tag(self, title, repetition=1, drawing=None):
        uid, u = self._uid("BlockTag")
        self.repo[str(uid)] = {"__type__": "BlockTag", "uid": u, "repetition": self.int(repetition),
                               "aesthetics": {"__type__": "BlockAesthetics", "title": title,
                                              "description": None, "fill_color": None,
                                              "references": None, "formula": None,
                                              "drawing": drawing}}
        return uid

    def slot(self, name):
        uid, u = self._uid("TapeSlot", name)
        self.repo[str(uid)] = {"__type__": "TapeSlot", "uid": u}
        return uid

    # ---------------------------------------------------------------- inline terms
    def reals(self):
        return {"__type__": "Reals"}

    def nat(self, bound):
        return {"__type__": "Natural", "max_value": bound if isinstance(bound, dict)
                else self.int(bound)}

    def array(self, axes, dt=None):
        return {"__type__": "Array", "datatype": dt or self.reals(),
                "_shape": [self.ref(a) for a in axes]}

    def weave(self, shape, dt=None):
        return {"__type__": "Weave", "datatype": dt or self.reals(),
                "_shape": [self.TILED if a == "*" else self.ref(a) for a in shape]}

    def rearr(self, mapping, dom_axes):
        return {"__type__": "Rearrangement", "mapping": list(mapping),
                "_dom": [self.ref(a) for a in dom_axes]}

    def rearr_arrays(self, mapping, arrays):
        return {"__type__": "Rearrangement", "mapping": list(mapping), "_dom": list(arrays)}

    def stride(self, dom_axes, rows, name=None):
        return {"__type__": "StrideMorphism", "_dom": [self.ref(a) for a in dom_axes],
                "_cod_stride_shift": [[self.ref(ax), [self.int(s) if isinstance(s, int) else s
                                                      for s in strides],
                                       self.int(shift) if isinstance(shift, int) else shift]
                                      for ax, strides, shift in rows],
                "name": name}

    def op(self, type_name, name=None, **fields):
        out = {"__type__": type_name,
               "name": None if name is None else {"__type__": "DynamicName", "body": name,
                                                  "subscript": None, "settings": None}}
        out.update(fields)
        return out

    def bc(self, operator, ins, outs, rxs, backup=None):
        out = {"__type__": "Broadcasted", "operator": operator, "input_weaves": ins,
               "output_weaves": outs, "reindexings": rxs, "backup_degree": None}
        if backup is not None:
            out["backup_degree"] = {"__type__": "ProdObject",
                                    "content": [self.ref(a) for a in backup]}
        return out

    def composed(self, *items):
        return {"__type__": "Composed", "content": list(items)}

    def product(self, *items):
        return {"__type__": "ProductOfMorphisms", "content": list(items)}

    def block(self, body, tag):
        return {"__type__": "Block", "body": body, "block_tag": self.ref(tag)}

    def doc(self, data):
        return {"uid_repository": copy.deepcopy(self.repo), "data": data}


@pytest.fixture
def mk():
    return SpecMaker()


@pytest.fixture
def load_doc():
    """Load a plain document (a dict) through the real loader, as text."""
    from ncdc.spec.loader import load_text

    def _load(doc, salvage=False):
        return ncdc.Spec(load_text(json.dumps(doc), "<test>", salvage))

    return _load


# ---------------------------------------------------------------- browser tests under CI
def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI a skipped browser test (``tests/test_view*.py``) is a failure: CI must have
    Chromium and playwright. Locally it skips, with its reason in the summary (``-rs``)."""
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and _in_ci() and item.path.name.startswith("test_view")
            and not hasattr(report, "wasxfail")):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        reason = str(reason).removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = (f"CI is set, so this browser test may not skip: {reason}. "
                           "Install Chromium (apt-get install chromium) and playwright.")


@pytest.fixture(scope="session")
def page_path(tmp_path_factory):
    """The bundled spec's view page, as ``ncdc view -o model.html`` writes it."""
    from ncdc.cli import main

    out = tmp_path_factory.mktemp("view") / "model.html"
    assert main(["view", "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def gloo():
    """Skips the test without torch.distributed's gloo backend (:data:`tests.distributed_marks.
    GLOO`); looked at when a test runs, not when its module is collected."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
