"""Saving and loading parameter dicts (``key -> ndarray``) as ``.npz`` or ``.safetensors``.

Keys are the readable keys of :func:`ir.params.param_specs` (``/``, ``{``, ``\\`` and ``^``
included) and are stored verbatim. Arrays are written as they are (float64 / int64 /
complex128; safetensors has no complex dtype, so a complex array is an error there). Loading
returns plain numpy arrays; :func:`interpreter.interpret` validates keys and shapes.
"""
from __future__ import annotations

import os
import zipfile

import numpy as np
from ncdc.ir.errors import EvaluationError

FORMATS = (".npz", ".safetensors")


def _format(path) -> str:
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in FORMATS:
        raise EvaluationError(f"parameter file {os.fspath(path)!r}: use one of "
                              f"{', '.join(FORMATS)}")
    return ext


def save_params(params: dict, path) -> None:
    """Write ``params`` to ``path`` (format chosen by the extension)."""
    ext = _format(path)
    arrays = {k: np.ascontiguousarray(np.asarray(v)) for k, v in params.items()}
    if ext == ".npz":
        np.savez(path, **arrays)
        return
    from safetensors.numpy import save_file

    for k, v in arrays.items():
        if np.iscomplexobj(v):
            raise EvaluationError(f"parameter {k!r} is complex; safetensors cannot hold it "
                                  "(use .npz)")
    save_file(arrays, os.fspath(path))


def load_params(path) -> dict[str, np.ndarray]:
    """Read a parameter file written by :func:`save_params` (or any npz/safetensors file)."""
    ext = _format(path)
    try:
        if ext == ".npz":
            with np.load(path, allow_pickle=False) as f:
                return {k: f[k] for k in f.files}
        from safetensors.numpy import load_file

        return dict(load_file(os.fspath(path)))
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise EvaluationError(f"cannot read parameter file {os.fspath(path)!r}: {exc}") \
            from None
    except Exception as exc:  # safetensors raises its own error type on a corrupt header
        if type(exc).__module__.startswith("safetensors"):
            raise EvaluationError(f"cannot read parameter file {os.fspath(path)!r}: {exc}") \
                from None
        raise
