"""The CLI behaves as argparse tools do: usage when bare, --version, fast and clean help, --json
on every command (errors included), progress only on a terminal, one clean check table."""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ncdc
from ncdc.cli import COMMANDS, build_parser, main
from tests.conftest import TRANSFORMER

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "sympy", "torch", "networkx", "ncdc.ir", "ncdc.spec", "ncdc.interpreter",
         "ncdc.codegen")


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _python(code: str, **env) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120, check=False)


def subparsers() -> dict[str, argparse.ArgumentParser]:
    p = build_parser()
    (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


# --------------------------------------------------------------------------- usage, version


def test_bare_ncdc_prints_usage_and_the_two_commands_to_start_with(capsys):
    rc, out, err = run(capsys)
    assert rc == 0 and err == ""
    assert out.startswith("usage: ncdc")
    assert "ncdc validate SPEC.json" in out and "ncdc check [SPEC.json]" in out
    assert "agree" not in out                      # no check ran
    for name in COMMANDS:
        assert re.search(rf"^\s+{name}\s+\S", out, re.MULTILINE), name


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"ncdc {ncdc.__version__}"


# --------------------------------------------------------------------------- help: fast, clean


def test_help_imports_no_heavy_module_and_is_fast(tmp_path):
    """Timed as an installed copy runs: with bytecode cached (a first run writes it to a
    private cache; the second is timed), in CPU time (the machine may be shared)."""
    code = (
        "import sys, time\n"
        "t = time.process_time()\n"
        "from ncdc.cli import build_parser\n"
        "import argparse\n"
        "p = build_parser(); p.format_help()\n"
        "sub = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)][0]\n"
        "for q in sub.choices.values(): q.format_help()\n"
        "took = time.process_time() - t\n"
        f"heavy = sorted(m for m in sys.modules if m.startswith({HEAVY!r}))\n"
        "print(took); print(heavy)\n")
    cache = {"PYTHONPYCACHEPREFIX": str(tmp_path), "PYTHONDONTWRITEBYTECODE": ""}
    _python(code, **cache)
    r = _python(code, **cache)
    assert r.returncode == 0, r.stderr
    took, heavy = r.stdout.splitlines()
    assert heavy == "[]"
    assert float(took) < 0.3                        # ncdc's own part of `ncdc --help`


def test_import_ncdc_is_lazy():
    r = _python(f"import sys, ncdc; print(sorted(m for m in sys.modules if m.startswith("
                f"{HEAVY!r})))")
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_bare_command_line_in_a_subprocess():
    r = subprocess.run([sys.executable, "-m", "ncdc"], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False)
    assert r.returncode == 0 and r.stdout.startswith("usage: ncdc") and r.stderr == ""


METAVAR = re.compile(r"^(?:[A-Z][A-Z0-9_]*(?:=[A-Z])?)$")


@pytest.mark.parametrize("name", COMMANDS)
def test_help_is_plain_and_every_option_has_help(name):
    p = subparsers()[name]
    text = p.format_help()
    for markup in ("``", "`", ":mod:", ":func:", ":class:", "§", "docs/format.md"):
        assert markup not in text, (name, markup)
    for action in p._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help and action.help.strip(), (name, action.dest)
        if action.nargs != 0:                       # takes a value: one metavar style
            metavar = action.metavar or action.dest.upper()
            assert METAVAR.match(metavar), (name, action.dest, metavar)
            if action.option_strings:
                assert action.choices is None or action.metavar, (name, action.dest)


def test_top_level_help_is_plain():
    text = build_parser().format_help()
    assert "``" not in text and "§" not in text and "--version" in text


# --------------------------------------------------------------------------- --json everywhere


def _json(capsys, *argv, status=0):
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == status, (argv, out, err)
    return json.loads(out)


def test_every_command_takes_json(capsys, tmp_path):
    t = str(TRANSFORMER)
    for name in COMMANDS:
        assert "--json" in subparsers()[name].format_help(), name
    v = _json(capsys, "validate", t)
    assert v["valid"] is True and v["counts"] == {"error": 0, "warning": 0, "info": 0}
    show = _json(capsys, "show", t, "--preset", "tiny")
    layer = next(b for b in show["blocks"] if b["title"] == "Transformer Layer")
    assert layer["repetition"] == 6 and isinstance(layer["repetition"], int)
    assert layer["dom"] == [{"datatype": "R", "axes": ["x", "m"], "shape": [4, 4]}]
    symbolic = _json(capsys, "show", t)
    assert symbolic["blocks"][0]["dom"][0]["shape"] == ["x"]
    b = _json(capsys, "blocks", t)
    assert b["with_body"] == 7 and isinstance(b["titles"][0]["occurrences"], int)
    prm = _json(capsys, "params", t, "--preset", "tiny")
    agg = next(r for r in prm["params"] if r["key"] == "Aggregator/L.weight")
    assert agg["shape"] == [4, 4] and agg["axes"] == ["m", "v"] and agg["elements"] == 16
    g = _json(capsys, "graph", t, "-o", str(tmp_path / "g.dot"))
    assert isinstance(g["nodes"], int) and g["nodes"] > 0
    ev = _json(capsys, "eval", t, "--block", "Aggregator")
    assert ev["outputs"][0]["shape"] == [4, 4] and isinstance(ev["outputs"][0]["mean"], float)
    comp = _json(capsys, "compile", t, "--block", "Feed Forward")
    assert comp["source"].startswith(('"""', 'r"""', "#", "import", "from")) and comp["lines"] > 5
    out = tmp_path / "ff.py"
    comp = _json(capsys, "compile", t, "--block", "Feed Forward", "-o", str(out))
    assert comp["source"] is None and out.read_text().count("\n") + 1 >= comp["lines"]
    chk = _json(capsys, "check", t, "--block", "Attention Core")
    (r,) = chk["results"]
    assert chk["ok"] and r["ok"] and r["problem"] is None
    assert r["dom"] == [[4, 4, 4]] * 3 and r["cod"] == [[4, 4, 4]]
    assert isinstance(r["max_abs"], float) and r["block"].endswith("Attention Core")


def test_json_errors(capsys, tmp_path):
    t = str(TRANSFORMER)
    e = _json(capsys, "show", t, "--block", "Feed Forwrd", status=1)["error"]
    assert e["type"] == "BlockLookupError" and e["exit_status"] == 1
    assert e["candidates"][0]["label"] == r"Transformer Layer / Add \& Norm~1 / Feed Forward"
    e = _json(capsys, "compile", str(tmp_path / "missing.json"), status=2)["error"]
    assert e["type"] == "UsageError" and "missing.json" in e["message"]  # checked before use
    e = _json(capsys, "params", t, "--size", "zz=3", status=1)["error"]
    assert e["type"] == "BindingError"
    e = _json(capsys, "graph", t, "-o", str(tmp_path / "g.png"), status=2)["error"]
    assert e["type"] == "UsageError"
    with pytest.raises(SystemExit) as ex:
        main(["check", t, "--json", "--bogus"])
    assert ex.value.code == 2
    e = json.loads(capsys.readouterr().out)["error"]
    assert e["type"] == "UsageError" and "--bogus" in e["message"]


def test_plain_errors_are_one_line_on_stderr(capsys, tmp_path):
    rc, out, err = run(capsys, "show", str(tmp_path / "missing.json"))
    assert rc == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1


# --------------------------------------------------------------------------- check output


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.slow
def test_check_progress_only_on_a_terminal_and_one_clean_table(capsys, monkeypatch):
    t = str(TRANSFORMER)
    rc, out, err = run(capsys, "check", t)
    assert rc == 0 and "[1/9]" not in err and "\r" not in err     # piped: no progress
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["result", "max", "abs"] and lines[-1] == lines[-1].strip()
    rows = lines[1:-1]
    assert len(rows) == 9 and all(r.startswith("ok ") for r in rows)
    labels = [r.split("  ")[-1] for r in rows]
    assert r"Transformer Layer / Add \& Norm" in labels
    assert r"Transformer Layer / Add \& Norm~1" in labels               # told apart
    assert len(set(labels)) == len(labels)
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(["check", t]) == 0
    progress = tty.getvalue()
    assert progress.count("\r\x1b[K[") == 9 and "[9/9] (whole model)" in progress
    assert progress.endswith("\r\x1b[K")                               # cleared at the end
    assert "[1/9]" not in capsys.readouterr().out


def test_check_labels_name_the_blocks_checked(bundled, transformer):
    """Every label `ncdc check` prints is accepted by --block and names the block checked."""
    from ncdc.commands.check import targets

    for spec in (bundled, transformer):
        args = argparse.Namespace(block=None, all=False)
        todo = targets(spec, args)
        labels = [label for label, _, _ in todo[:-1]]
        assert len(set(labels)) == len(labels)
        for label, node, _ in todo[:-1]:
            assert spec.block(label) is node, label
