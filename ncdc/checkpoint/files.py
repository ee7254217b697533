"""Tensor files read lazily: one ``.safetensors`` file, a sharded checkpoint (its
``model.safetensors.index.json`` or the directory holding it), or an ``.npz`` archive.

A safetensors shard is memory-mapped when the first of its tensors is read; its JSON header is
checked first (known dtypes, shapes that match the byte ranges, ranges inside the file). Reading
a tensor copies its bytes out of the map and then drops those pages from the process
(``madvise(MADV_DONTNEED)`` on the private map), so the pages of a read tensor do not stay
resident: a load holds the model it fills plus the tensor in flight, however many shards are
open. (``safetensors.safe_open`` keeps every touched page mapped until the file is closed, which
for a checkpoint read in model order is all of it.) A shard is unmapped once every tensor a load
announced (:meth:`TensorFiles.expect`) has been read. An ``.npz`` archive has no lazy reader and
is read whole (headers checked first, ``ncdc.interpreter.weights.read_npz``).
"""
from __future__ import annotations

import math
import mmap
import os
import struct
from collections import Counter

from ncdc.interpreter.weights import check_offsets, parse_json

from .errors import CheckpointError, listing
from .mapping import show

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
            with open(path, "rb") as fh:
                doc = parse_json(path, None, fh.read(64 << 20).decode("utf-8"), 4,
                                 lambda why: _fail(path, f"the index is {why}"))
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
    shard = Shard(path)
    try:
        return dict.fromkeys(shard.entries, path), shard.metadata
    finally:
        shard.close()


DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
          "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
          "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
          "F8_E8M0": "float8_e8m0fnu"}
"""safetensors dtype name -> torch dtype name."""


class Shard:
    """One safetensors file: its checked header and a private memory map of it."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.map = None
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                head = fh.read(8)
                if len(head) < 8:
                    raise _fail(self.path, "too short for a safetensors header")
                (n,) = struct.unpack("<Q", head)
                if n > min(size - 8, 100 << 20):
                    raise _fail(self.path, f"the header claims {n} bytes; the file has {size}")
                header = parse_json(self.path, None, fh.read(n).decode("utf-8"), 3,
                                    lambda why: _fail(self.path, f"the header is {why}"))
                if not isinstance(header, dict):
                    raise _fail(self.path, "the header is not a JSON object")
                meta = header.pop("__metadata__", None) or {}
                self.base = 8 + n
                self.entries = {name: self._entry(name, e, size - 8 - n)
                                for name, e in header.items()}
                check_offsets(self.path, [(k, b, e) for k, (_d, _s, b, e)
                                          in self.entries.items()],
                              lambda key, why: _fail(self.path, f"tensor {key!r}: {why}"))
                if size > self.base:
                    self.map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
        except CheckpointError:
            raise
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise _fail(self.path, f"{type(exc).__name__}: {exc}") from None
        self.metadata = {str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) \
            else {}

    def _entry(self, name, e, data_len):
        import torch

        if not isinstance(e, dict):
            raise _fail(self.path, f"tensor {name!r}: the header entry is not an object")
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dtype not in DTYPES:
            raise _fail(self.path, f"tensor {name!r}: unsupported dtype {show(dtype)}")
        if not (isinstance(shape, list) and all(type(d) is int and 0 <= d < 2**62
                                                for d in shape)):
            raise _fail(self.path, f"tensor {name!r}: malformed shape {show(shape)}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs)
                and 0 <= offs[0] <= offs[1] <= data_len):
            raise _fail(self.path, f"tensor {name!r}: data offsets {show(offs)} outside the "
                                   f"{data_len} data bytes")
        dt = getattr(torch, DTYPES[dtype])
        need = math.prod(shape) * dt.itemsize
        if need != offs[1] - offs[0]:
            raise _fail(self.path, f"tensor {name!r}: shape {shape} of {dtype} needs {need} "
                                   f"bytes; the offsets give {offs[1] - offs[0]}")
        return dt, tuple(shape), offs[0], offs[1]

    def info(self, name):
        dt, shape, _, _ = self.entries[name]
        return shape, str(dt).removeprefix("torch.")

    def read(self, name):
        """A copy of tensor ``name``; the pages it was read from are dropped."""
        import torch

        dt, shape, begin, end = self.entries[name]
        if end == begin:
            return torch.empty(shape, dtype=dt)
        start = self.base + begin
        out = torch.frombuffer(self.map, dtype=dt, count=math.prod(shape),
                               offset=start).reshape(shape).clone()
        lo = start // mmap.PAGESIZE * mmap.PAGESIZE
        try:
            self.map.madvise(mmap.MADV_DONTNEED, lo, self.base + end - lo)
        except (AttributeError, OSError, ValueError):
            pass  # not available: the pages stay until the shard is closed
        return out

    def close(self) -> None:
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:  # a tensor still views the map: it goes with the last one
                pass
            self.map = None


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

    def _handle(self, name) -> Shard:
        if name not in self.shards:
            raise CheckpointError(f"checkpoint {self.path!r} has no tensor {name!r}")
        file = self.shards[name]
        h = self._open.get(file)
        if h is None:
            h = self._open[file] = Shard(file)
        if name not in h.entries:
            raise _fail(file, f"the index lists tensor {name!r} in this shard; it is not there")
        return h

    def info(self, name) -> tuple[tuple[int, ...], str]:
        """(shape, torch dtype name) from the header, no data read."""
        return self._handle(name).info(name)

    def expect(self, names) -> None:
        """Announce the tensors a load will read: each shard closes after its last one."""
        self._left = Counter(self.shards[n] for n in names if n in self.shards)

    def get(self, name):
        """The tensor ``name`` (a torch tensor of the file's dtype, owning its memory)."""
        h = self._handle(name)
        t = h.read(name)
        file = self.shards[name]
        if self._left.get(file):
            self._left[file] -= 1
            if self._left[file] == 0:
                self._open.pop(file).close()
        return t

    def close(self) -> None:
        for h in self._open.values():
            h.close()
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
        """Announce the reads of a load: an array is dropped after its last one."""
        self._left = Counter(names)

    def get(self, name):
        import torch

        left = getattr(self, "_left", Counter())
        left[name] -= 1
        return torch.from_numpy(self._arrays.pop(name) if left[name] <= 0
                                else self._arrays[name].copy())

    def close(self) -> None:
        self._arrays.clear()


def header_of(path) -> tuple[list[str], dict]:
    """The tensor names and the file metadata of a weights path (an ``.npz`` archive or any
    checkpoint path :func:`shard_map` takes), without reading tensor data."""
    if os.fspath(path).lower().endswith(".npz"):
        from ncdc.interpreter.weights import npz_header

        return npz_header(path)
    shards, meta = shard_map(path)
    return list(shards), meta


def open_tensors(path):
    """:class:`NpzTensors` for an ``.npz`` path, else :class:`TensorFiles`."""
    if os.fspath(path).lower().endswith(".npz"):
        return NpzTensors(path)
    return TensorFiles(path)


def open_source(path, map_path=None, dtype: str = "float32"):
    """The parameter source of a weights path: its tensors as they are, or renamed and
    transformed by the checkpoint map at ``map_path`` (dequantized weights in float64 for a
    float64 module, else float32)."""
    files = open_tensors(path)
    if map_path is None:
        return files
    import torch

    from .mapped import MappedSource
    from .mapping import load_map

    work = torch.float64 if dtype == "float64" else torch.float32
    try:
        return MappedSource(files, load_map(map_path), work)
    except Exception:
        files.close()
        raise


__all__ = ["INDEX_NAME", "NpzTensors", "TensorFiles", "header_of", "open_source", "open_tensors",
           "shard_map"]
