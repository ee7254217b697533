"""Tensor files read lazily: one ``.safetensors`` file, a sharded checkpoint (its
``model.safetensors.index.json`` or the directory holding it), or an ``.npz`` archive.

A safetensors shard is opened (memory-mapped, through ``safetensors.safe_open``) when the first
of its tensors is read and closed once every tensor a load announced (:meth:`TensorFiles.expect`)
has been read, so the pages of a finished shard leave the process: a load holds at most the
model it fills plus the shards in use. Shapes and dtypes come from the headers without reading
data. An ``.npz`` archive has no lazy reader and is read whole (headers checked first,
``ncdc.interpreter.weights.read_npz``).
"""
from __future__ import annotations

import json
import os
from collections import Counter

from .errors import CheckpointError, listing

INDEX_NAME = "model.safetensors.index.json"


def _fail(path, why) -> CheckpointError:
    return CheckpointError(f"cannot read checkpoint {os.fspath(path)!r}: {why}")


def shard_map(path) -> tuple[dict[str, str], dict]:
    """``tensor name -> shard file`` and the file metadata of a checkpoint path: a
    ``.safetensors`` file, an index JSON file, or a directory holding the index (or exactly one
    ``.safetensors`` file)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        index = os.path.join(path, INDEX_NAME)
        if os.path.isfile(index):
            return shard_map(index)
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
        if len(files) != 1:
            raise _fail(path, f"a directory needs {INDEX_NAME} or exactly one .safetensors "
                              f"file; it has {len(files)}")
        return shard_map(os.path.join(path, files[0]))
    if path.endswith(".json"):
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.loads(fh.read(64 << 20))
        except (OSError, ValueError) as exc:
            raise _fail(path, f"the index is not readable JSON ({exc})") from None
        wmap = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(wmap, dict) or not all(isinstance(v, str) for v in wmap.values()):
            raise _fail(path, "the index has no 'weight_map' object of tensor -> file")
        base = os.path.dirname(os.path.abspath(path))
        out = {}
        for name, file in wmap.items():
            if os.path.isabs(file) or ".." in file.replace("\\", "/").split("/"):
                raise _fail(path, f"tensor {name!r}: shard {file!r} is outside the index's "
                                  "directory")
            out[name] = os.path.join(base, file)
        missing = sorted({f for f in out.values() if not os.path.isfile(f)})
        if missing:
            raise _fail(path, f"shard(s) listed in the index do not exist: "
                              f"{listing(os.path.basename(f) for f in missing)}")
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        return out, meta
    if not path.endswith(".safetensors"):
        raise _fail(path, "expected a .safetensors file, an index .json or a directory")
    handle = _open(path)
    names = handle.keys()
    return dict.fromkeys(names, path), dict(handle.metadata() or {})


def _open(path):
    from safetensors import safe_open

    try:
        return safe_open(os.fspath(path), framework="pt", device="cpu")
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
        raise _fail(path, f"{type(exc).__name__}: {exc}") from None


class TensorFiles:
    """The tensors of a checkpoint path (see the module docstring), by name."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.shards, self.metadata = shard_map(self.path)
        self._open: dict[str, object] = {}
        self._left: Counter = Counter()

    def names(self) -> list[str]:
        return list(self.shards)

    def __contains__(self, name) -> bool:
        return name in self.shards

    def _handle(self, name):
        if name not in self.shards:
            raise CheckpointError(f"checkpoint {self.path!r} has no tensor {name!r}")
        file = self.shards[name]
        h = self._open.get(file)
        if h is None:
            h = self._open[file] = _open(file)
        return h

    def info(self, name) -> tuple[tuple[int, ...], str]:
        """(shape, safetensors dtype name) from the header, no data read."""
        try:
            sl = self._handle(name).get_slice(name)
            return tuple(sl.get_shape()), str(sl.get_dtype())
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _fail(self.shards[name], f"tensor {name!r}: {exc}") from None

    def expect(self, names) -> None:
        """Announce the tensors a load will read: each shard closes after its last one."""
        self._left = Counter(self.shards[n] for n in names if n in self.shards)

    def get(self, name):
        """The tensor ``name`` (a torch tensor of the file's dtype, owning its memory)."""
        h = self._handle(name)
        file = self.shards[name]
        try:
            t = h.get_tensor(name)
        except Exception as exc:  # noqa: BLE001
            raise _fail(file, f"tensor {name!r}: {type(exc).__name__}: {exc}") from None
        if self._left.get(file):
            self._left[file] -= 1
            if self._left[file] == 0:
                self._open.pop(file, None)
        return t

    def close(self) -> None:
        self._open.clear()


class NpzTensors:
    """The arrays of an ``.npz`` archive as torch tensors (read whole, headers checked)."""

    def __init__(self, path):
        from ncdc.interpreter.weights import read_npz

        self.path = os.fspath(path)
        loaded = read_npz(self.path)
        self.metadata = loaded.metadata
        self._arrays = dict(loaded)

    def names(self) -> list[str]:
        return list(self._arrays)

    def __contains__(self, name) -> bool:
        return name in self._arrays

    def info(self, name):
        a = self._arrays[name]
        return tuple(a.shape), str(a.dtype)

    def expect(self, names) -> None:
        pass

    def get(self, name):
        import torch

        return torch.from_numpy(self._arrays.pop(name))

    def close(self) -> None:
        self._arrays.clear()


def open_tensors(path):
    """:class:`NpzTensors` for an ``.npz`` path, else :class:`TensorFiles`."""
    if os.fspath(path).lower().endswith(".npz"):
        return NpzTensors(path)
    return TensorFiles(path)


__all__ = ["INDEX_NAME", "NpzTensors", "TensorFiles", "open_tensors", "shard_map"]
