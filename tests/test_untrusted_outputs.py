"""Outputs (issue 24 point 5): every writer goes through one atomic helper, so a failing disk
leaves no half file and no traceback (exit 1, one line naming the path and the OS reason);
an output that is an input, or an empty path, is refused; a symlinked output is written
through to its target."""
from __future__ import annotations

import errno
import os
import shutil

import numpy as np
import pytest

from ncdc.commands import output as output_mod
from ncdc.commands.output import OutputError, write_output, write_text
from tests.conftest import TRANSFORMER
from tests.test_hostile_files import _one_line_error, _run


def _full_disk(monkeypatch):
    """Every fsync fails as on a full disk."""

    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(output_mod.os, "fsync", fsync)


WRITERS = [
    ("compile", "m.py", lambda o: ["compile", TRANSFORMER, "-o", o]),
    ("eval --out", "o.npz", lambda o: ["eval", TRANSFORMER, "--out", o]),
    ("eval --save-params npz", "p.npz", lambda o: ["eval", TRANSFORMER, "--save-params", o]),
    ("eval --save-params safetensors", "p.safetensors",
     lambda o: ["eval", TRANSFORMER, "--save-params", o]),
    ("run --out", "o.npz", lambda o: ["run", TRANSFORMER, "--params", "synthetic", "--out", o]),
    ("run --save-params", "p.npz",
     lambda o: ["run", TRANSFORMER, "--params", "synthetic", "--save-params", o]),
    ("view", "v.html", lambda o: ["view", TRANSFORMER, "-o", o]),
    ("graph", "g.dot", lambda o: ["graph", TRANSFORMER, "-o", o]),
]


@pytest.mark.parametrize("what, name, argv", WRITERS, ids=[w[0] for w in WRITERS])
def test_a_full_disk_leaves_no_half_file_and_no_traceback(tmp_path, capsys, monkeypatch,
                                                          what, name, argv):
    out = tmp_path / name
    rc, _, err = _run(capsys, *argv(out))
    assert rc == 0 and out.exists(), err
    before = out.read_bytes()
    _full_disk(monkeypatch)
    rc, _, err = _run(capsys, *argv(out))
    assert rc == 1 and _one_line_error(err), err
    assert str(out) in err and "No space left on device" in err
    assert out.read_bytes() == before               # the earlier file is untouched
    assert sorted(os.listdir(tmp_path)) == [name]   # no temporary file left behind
    out.unlink()
    rc, _, err = _run(capsys, *argv(out))
    assert rc == 1 and not out.exists() and os.listdir(tmp_path) == []


def test_the_helper_cleans_up_on_any_failure(tmp_path):
    target = tmp_path / "t.txt"

    def half(tmp):
        with open(tmp, "w") as fh:
            fh.write("half")
        raise ValueError("boom")

    with pytest.raises(ValueError):
        write_output(target, half)
    assert os.listdir(tmp_path) == []
    write_text(target, "whole")
    assert target.read_text() == "whole" and os.listdir(tmp_path) == ["t.txt"]
    with pytest.raises(OutputError, match="cannot write .*: No such file or directory"):
        write_text(tmp_path / "missing" / "t.txt", "x")


def test_the_new_file_keeps_the_mode_of_the_one_it_replaces(tmp_path):
    target = tmp_path / "t.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    write_text(target, "new")
    assert target.read_text() == "new" and (os.stat(target).st_mode & 0o777) == 0o640


def test_an_output_equal_to_an_input_is_refused(tmp_path, capsys):
    spec = tmp_path / "in.py"
    shutil.copyfile(TRANSFORMER, spec)
    rc, _, err = _run(capsys, "compile", spec, "-o", spec)
    assert rc == 2 and _one_line_error(err) and "same file as SPEC" in err
    assert spec.read_bytes() == TRANSFORMER.read_bytes()
    w = tmp_path / "w.npz"
    rc, _, _ = _run(capsys, "eval", TRANSFORMER, "--save-params", w)
    before = w.read_bytes()
    rc, _, err = _run(capsys, "eval", TRANSFORMER, "--params", w, "--out", w)
    assert rc == 2 and _one_line_error(err) and "same file as --params" in err
    link = tmp_path / "link.npz"
    link.symlink_to(w)
    rc, _, err = _run(capsys, "run", TRANSFORMER, "--params", w, "--out", link)
    assert rc == 2 and "same file as --params" in err
    rc, _, err = _run(capsys, "eval", TRANSFORMER, "--out", w, "--save-params", w)
    assert rc == 2 and "same file as --out" in err
    assert w.read_bytes() == before


@pytest.mark.parametrize("argv", [
    ["compile", TRANSFORMER, "-o", ""],
    ["view", TRANSFORMER, "-o", ""],
    ["eval", TRANSFORMER, "--out", ""],
    ["eval", TRANSFORMER, "--save-params", ""],
    ["run", TRANSFORMER, "--params", "synthetic", "--out", ""],
])
def test_an_empty_output_path_is_refused(capsys, argv):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and _one_line_error(err) and "empty path" in err
    assert out == ""


def test_a_symlinked_output_is_written_through(tmp_path, capsys):
    real = tmp_path / "real.py"
    real.write_text("old")
    link = tmp_path / "link.py"
    link.symlink_to(real)
    rc, _, err = _run(capsys, "compile", TRANSFORMER, "-o", link)
    assert rc == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "class " in real.read_text()
    assert sorted(os.listdir(tmp_path)) == ["link.py", "real.py"]


def test_no_writer_bypasses_the_helper():
    """Every file the commands write goes through ncdc.commands.output (grep of the sources:
    no direct open(..., 'w'), np.savez or save_file outside it)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "ncdc" / "commands"
    bad = re.compile(r"open\([^)]*['\"][wa]b?['\"]|np\.savez\(|save_file\(|\.write_text\(|"
                     r"\.write_bytes\(")
    found = [f"{p.name}:{i}" for p in root.glob("*.py") if p.name != "output.py"
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if bad.search(line)]
    assert found == [], found
    assert np is not None
