"""The Python API runs the command line's size gate: ``ncdc.interpret`` and
``ncdc.compile_torch`` refuse what ``ncdc eval`` / ``ncdc compile`` refuse for sizes (code
``size-invalid``), with the same typed error (``BindingError``, ``refused: size-invalid: ...``),
before any allocation; valid bindings are untouched."""
from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

import ncdc
from ncdc.cli import main
from ncdc.ir.errors import BindingError
from ncdc.ir.numeric import INT64_MAX
from tests.conftest import ATTENTION_CORE

HUGE = {"x": 3, "h": 2**31, "k": 2**31, "q": 1}
"""Attention core sizes whose R[x, h, k] holds 3 * 2**62 > 2**63 - 1 elements."""


def _cli_error(capsys, cmd, path, sizes) -> str:
    flags = [a for n, v in sizes.items() for a in ("--size", f"{n}={v}")]
    rc = main([cmd, str(path), *flags])
    _, err = capsys.readouterr()
    assert rc == 1
    return err.strip()


def _first_reason(message: str) -> str:
    """``refused: size-invalid: <first diagnostic>`` without its location or count."""
    return message.split(" (and ")[0].split(" at data")[0]


@pytest.mark.parametrize("api", ["interpret", "compile_torch"])
def test_api_refuses_arrays_beyond_int64_as_the_cli_does(capsys, api):
    assert math.prod([HUGE["x"], HUGE["h"], HUGE["k"]]) > INT64_MAX   # independent arithmetic
    spec = ncdc.load(ATTENTION_CORE)
    with pytest.raises(BindingError) as e:
        getattr(ncdc, api)(spec, sizes=HUGE)
    msg = e.value.message
    assert msg.startswith("refused: size-invalid: ") and str(3 * 2**62) in msg
    cli = _cli_error(capsys, "eval" if api == "interpret" else "compile", ATTENTION_CORE, HUGE)
    assert _first_reason(msg) in cli
    # the block alone, and the same sizes as an env, are refused alike
    with pytest.raises(BindingError, match="refused: size-invalid"):
        getattr(ncdc, api)(spec.block("Attention Core"), sizes=HUGE)
    env = spec.bind("tiny", sizes=HUGE).env
    with pytest.raises(BindingError, match="refused: size-invalid"):
        getattr(ncdc, api)(spec.data, env=env)


def test_api_refuses_a_repetition_beyond_the_limit_quickly(tmp_path):
    doc = json.loads(ATTENTION_CORE.read_text(encoding="utf-8"))
    for v in doc["uid_repository"].values():
        if v["__type__"] == "BlockTag":
            v["repetition"] = {"__type__": "Integer", "_value": 10**12}
    path = tmp_path / "rep.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    spec = ncdc.load(path)
    t0 = time.process_time()
    with pytest.raises(BindingError, match="repeats 1000000000000 times, beyond 65536"):
        ncdc.interpret(spec, sizes={"k": 2, "h": 2, "q": 3, "x": 4})
    assert time.process_time() - t0 < 3.0


def test_api_accepts_what_the_gate_accepts():
    spec = ncdc.load(ATTENTION_CORE)
    sizes = {"x": 3, "h": 2, "k": 2, "q": 1}
    run = ncdc.interpret(spec, sizes=sizes)
    outs = run(*[np.ones(s) for s in run.dom_shapes()])
    assert outs[0].shape == tuple(run.cod_shapes()[0])
