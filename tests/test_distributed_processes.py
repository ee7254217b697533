"""The launcher of ``ncdc run --nproc``: a stopped, killed or failing rank fails the run in
bounded time, names that rank, and leaves no process behind; ``--nproc`` is capped by the CPU
count; synthetic weights do not depend on the number of ranks."""
from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import time

import numpy as np
import pytest

from ncdc.cli import main
from ncdc.ir.errors import DistributedError, DistributedTimeout, UsageError
from tests.conftest import TRANSFORMER
from tests.distributed_marks import GLOO

T = str(TRANSFORMER)
MOE = ["--block", "Mixture of Experts"]
"""The bundled spec's routed experts: what ``--nproc`` splits over the ranks."""


def _stop_rank_1(rank, world):
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(600)


def _kill_rank_1(rank, world):
    if rank == 1:
        time.sleep(1.0)                     # rank 0 is waiting by now
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)


def _fail_rank_1(rank, world):
    if rank == 1:
        raise ValueError("rank one's own problem")
    time.sleep(600)


def _atexit_marks(rank, world, folder):
    """Registers an exit handler that would leave a file in ``folder``."""
    import atexit
    from pathlib import Path

    atexit.register(lambda: Path(folder, f"rank{rank}").write_text("the interpreter shut down"))
    return rank


def _no_rank_left(before) -> bool:
    return set(multiprocessing.active_children()) <= before


@pytest.mark.slow
@pytest.mark.parametrize("fn, error, text", [
    (_stop_rank_1, DistributedTimeout, "rank 1 of 2 stopped responding: no heartbeat for"),
    (_kill_rank_1, DistributedError, "rank 1 of 2 was killed by SIGKILL"),
    (_fail_rank_1, DistributedError, "rank 1 of 2 failed: ValueError: rank one's own problem"),
], ids=["SIGSTOP", "SIGKILL", "exception"])
@GLOO[0]
def test_the_rank_that_went_wrong_is_named_and_every_rank_stopped(fn, error, text):
    from ncdc.distributed import launch

    before = set(multiprocessing.active_children())
    started = time.monotonic()
    with pytest.raises(error) as e:
        launch(fn, 2, timeout=300, stall=3)
    took = time.monotonic() - started
    assert text in str(e.value) and e.value.rank == 1
    assert took < 120, took                 # the stall limit or the failure, not the timeout
    assert _no_rank_left(before)


@pytest.mark.slow
@GLOO[0]
def test_a_finished_rank_leaves_without_the_interpreters_shutdown(tmp_path):
    """A rank that returned (its group destroyed, its result written) ends with ``os._exit``:
    no exit handler and no C++ static destructor runs, so a clean rank cannot abort on the
    way out (gloo's threads: "terminate called without an active exception")."""
    from ncdc.distributed import launch

    before = set(multiprocessing.active_children())
    assert launch(_atexit_marks, 2, str(tmp_path), timeout=300) == [0, 1]
    assert list(tmp_path.iterdir()) == []
    assert _no_rank_left(before)


def _args(**kw):
    base = {"nproc": 1, "force_nproc": False, "timeout": 600.0}
    base.update(kw)
    return argparse.Namespace(**base)


def test_nproc_is_capped_by_the_cpu_count_unless_forced():
    from ncdc.commands.run import _check_processes

    cpus = os.cpu_count() or 1
    _check_processes(_args(nproc=cpus))
    with pytest.raises(UsageError, match=f"more processes than this machine's {cpus} CPU"):
        _check_processes(_args(nproc=cpus + 1))
    _check_processes(_args(nproc=cpus + 1, force_nproc=True))
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(UsageError, match="--timeout"):
            _check_processes(_args(timeout=bad))


@pytest.mark.parametrize("flags", [["--nproc", "1000"], ["--nproc", "2", "--timeout", "0"],
                                   ["--nproc", "0"]])
def test_the_command_line_refuses_process_flags_in_one_line(capsys, flags):
    if flags[1] == "1000" and (os.cpu_count() or 1) >= 1000:
        pytest.skip("a machine with 1000 CPUs")
    rc = main(["run", T, "--params", "synthetic", *flags])
    _, err = capsys.readouterr()
    assert rc == 2 and err.startswith("error: --") and len(err.strip().splitlines()) == 1


def _run_out(capsys, tmp_path, nproc: int) -> dict:
    out = tmp_path / f"o{nproc}.npz"
    argv = ["run", *MOE, "--params", "synthetic", "--seed", "5", "--dtype", "float64",
            "--out", str(out)]
    if nproc > 1:
        argv += ["--nproc", str(nproc), "--force-nproc", "--timeout", "300"]
    assert main(argv) == 0, capsys.readouterr()
    capsys.readouterr()
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.slow
@GLOO[0]
def test_synthetic_weights_are_the_same_for_one_and_two_ranks(capsys, tmp_path):
    before = set(multiprocessing.active_children())
    one = _run_out(capsys, tmp_path, 1)
    two = _run_out(capsys, tmp_path, 2)
    assert _no_rank_left(before)
    assert one.keys() == two.keys() and "out0" in one
    for k in one:
        np.testing.assert_allclose(two[k], one[k], rtol=1e-12, atol=1e-12)
    # the interpreter draws the same seeded weights and inputs for the same seed
    ref = tmp_path / "ref.npz"
    assert main(["eval", *MOE, "--seed", "5", "--out", str(ref)]) == 0
    capsys.readouterr()
    with np.load(ref) as z:
        np.testing.assert_allclose(one["out0"], z["out0"], rtol=1e-10, atol=1e-12)
