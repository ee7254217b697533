"""Every file a command writes goes through :func:`write_output`: the file appears whole or not
at all.

The content is written to a temporary file in the target's own directory, flushed to disk
(``fsync``) and renamed over the target (``os.replace``, atomic on one file system); the
directory is fsynced after the rename. A failure at any step (a full disk, a quota, a
permission) removes the temporary file, leaves any earlier file at the path as it was, and is
one :class:`OutputError` naming the path and the operating system's reason (exit 1).

A symlinked output is written through: the link's final target is replaced and the link is
kept. The new file gets the permissions of the file it replaces, else the usual ``0o666`` less
the umask.
"""
from __future__ import annotations

import os
import tempfile

from ncdc.ir.errors import SpecError, UsageError


class OutputError(SpecError):
    """An output file could not be written; names the path and the operating system's
    reason."""


def _mode(target: str) -> int:
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_output(path, fill, flag: str = "output") -> None:
    """Write the file at ``path`` atomically (see the module docstring). ``fill(tmp)`` writes
    the content to the path ``tmp`` (same directory and extension as the target)."""
    path = os.fspath(path)
    if path == "":
        raise UsageError(f"{flag}: an empty path names no file")
    target = os.path.realpath(path)
    folder, base = os.path.split(target)
    ext = os.path.splitext(base)[1]
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=f".tmp{ext}", dir=folder)
        os.close(fd)
        fill(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, _mode(target))
        os.replace(tmp, target)
        tmp = None
        try:
            dfd = os.open(folder, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass  # some file systems cannot sync a directory; the rename has happened
        finally:
            os.close(dfd)
    except OSError as exc:
        raise OutputError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def write_text(path, text: str, flag: str = "output") -> None:
    """``text`` (UTF-8) written to ``path`` by :func:`write_output`."""

    def fill(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    write_output(path, fill, flag)


def save_npz(path, arrays: dict, flag: str = "--out") -> None:
    """``arrays`` written to the ``.npz`` file ``path`` (``np.savez``) by
    :func:`write_output`."""
    import numpy as np

    write_output(path, lambda tmp: np.savez(tmp, **arrays), flag)


__all__ = ["OutputError", "save_npz", "write_output", "write_text"]
