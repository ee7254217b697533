"""Parameter, input and tape files (``.npz``, ``.safetensors``): untrusted bytes in, typed
errors or plain numpy arrays out.

**Reading** never trusts a file: every member's header (``.npy`` header inside an ``.npz``
archive, the JSON header of a safetensors file) is read and checked *before* any array is
decompressed or allocated — known dtype (no pickled objects), shape consistent with the bytes
the member holds, total decoded size within the memory available. Anything wrong (a 0-byte or
corrupt archive, a malformed header, a declared shape of 10^12 elements, a truncated payload)
is an :class:`~ir.errors.EvaluationError` naming the file and the key. BF16 and FP8 safetensors
are decoded with ``ml_dtypes`` (the ground truth for those formats) to float64.

**Writing** keeps each array's storage dtype and never loses a bit: an array whose datatype is
stored as BF16, FP16, FP32, E4M3 or E5M2 (without a block scale) and whose values that format
holds exactly (checked with ``ml_dtypes``) is written in it (safetensors: ``BF16``/``F16``/
``F32``/``F8_E4M3``/``F8_E5M2``; npz, which has no BF16/FP8 dtype: float32, exact for them);
values it cannot hold (the interpreter's float64 initialisation, say) stay float64, so a saved
file always reproduces the run. The declared formats are listed in the metadata
(``ncdc.storage``) either way; block-
scaled (MX) and other arrays as float64 / int64 / complex128 (safetensors has no complex dtype,
so a complex array is an error there). A file carries metadata (:func:`file_metadata`): the spec
hash, the binding, the quant mode and the ncdc version; :func:`compare_metadata` says what differs
from the run loading it.
"""
from __future__ import annotations

import json
import math
import os
import struct
import zipfile

import numpy as np

from ncdc.ir.datatypes import Quantified
from ncdc.ir.errors import EvaluationError

FORMATS = (".npz", ".safetensors")
METADATA_KEY = "__ncdc_metadata__"
"""npz member (a 0-d string array holding JSON) carrying a file's metadata."""

_ML = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_PLAIN = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
          "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "U16": np.uint16,
          "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_}
_ITEMSIZE = {"BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
MAX_MEMBERS = 1_000_000
"""Most members an npz archive may hold."""
MAX_HEADER = 100 << 20
"""Largest JSON header or metadata string (bytes)."""
MAX_JSON_DEPTH = 8
SAFETENSORS_DEPTH = 3
"""Nesting of a safetensors header: {name: {"shape": [..]}} (metadata: {key: string})."""
SMALL_MEMBER = 1 << 20
"""Members up to this many bytes are read as their header is checked."""
BOMB_RATIO, BOMB_BYTES = 200, 64 << 20
"""An npz member inflating beyond BOMB_BYTES at more than BOMB_RATIO:1 is refused before it
is inflated (weights compress about 1.1:1; a constant array, or a deflate bomb, about 1000:1)."""
STORAGE = {"BF16": "BF16", "FP16": "F16", "FP32": "F32", "E4M3": "F8_E4M3", "E5M2": "F8_E5M2"}
"""Encoding name (``ir.datatypes.Encoding``) -> safetensors dtype a weight is stored in."""


class Loaded(dict):
    """``key -> ndarray`` read from a file, with the file's ``metadata`` (a dict, maybe
    empty) and its ``path``."""

    def __init__(self, arrays, metadata=None, path=""):
        super().__init__(arrays)
        self.metadata = dict(metadata or {})
        self.path = path


def available_bytes() -> int:
    """Memory a read may use: MemAvailable from /proc/meminfo (8 GiB when unknown)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 8 << 30


def _ml_dtype(name: str):
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, _ML[name]))


def _format(path, what="parameter file") -> str:
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in FORMATS:
        raise EvaluationError(f"{what} {os.fspath(path)!r}: use one of {', '.join(FORMATS)}")
    return ext


def _fail(path, key, why) -> EvaluationError:
    where = f", key {key!r}" if key is not None else ""
    return EvaluationError(f"cannot read {os.fspath(path)!r}{where}: {why}")


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _decoded_bytes(shape, dtype) -> int:
    n = math.prod(shape)
    return n * (16 if np.issubdtype(dtype, np.complexfloating) else 8)


# --------------------------------------------------------------------------- npz


def read_npz(path, budget: int | None = None) -> Loaded:
    """Every array of an ``.npz`` archive, headers checked before decompressing."""
    budget = available_bytes() if budget is None else budget
    arrays, meta = {}, {}
    try:
        zf = zipfile.ZipFile(os.fspath(path))
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise _fail(path, None, f"not an npz archive ({exc})") from None
    with zf:
        plan, total, seen = [], 0, set()
        members = zf.infolist()
        if len(members) > MAX_MEMBERS:
            raise _fail(path, None, f"{len(members)} members; an npz file may hold at most "
                                    f"{MAX_MEMBERS}")
        for info in members:  # names first: no member is read when one is wrong
            name = info.filename
            key = name.removesuffix(".npy")
            if not name.endswith(".npy"):
                raise _fail(path, key, "an npz member must be an .npy array")
            if key in seen:
                raise _fail(path, key, "the key occurs twice")
            seen.add(key)
        for info in members:
            key = info.filename.removesuffix(".npy")
            fh = None
            try:
                fh = zf.open(info)
                version = np.lib.format.read_magic(fh)
                shape, fortran, dtype = (np.lib.format.read_array_header_1_0(fh)
                                         if version == (1, 0) else
                                         np.lib.format.read_array_header_2_0(fh))
                header = fh.tell()
            except Exception as exc:  # noqa: BLE001 - any malformed header is the file's fault
                if fh is not None:
                    fh.close()
                raise _fail(path, key, f"malformed .npy header ({type(exc).__name__}: "
                                       f"{exc})") from None
            with fh:
                _check_member(path, key, info, shape, dtype, header)
                total += _decoded_bytes(shape, dtype) if key != METADATA_KEY else \
                    math.prod(shape) * dtype.itemsize
                if total > budget:
                    raise _fail(path, key, f"declared shape {shape} of {dtype}: the arrays "
                                           f"would take {total} bytes, beyond the {budget} "
                                           "available")
                # a small member is read now (one header parse); a large one once every
                # header has been checked
                arr = _payload(path, key, fh, shape, fortran, dtype) \
                    if math.prod(shape) * dtype.itemsize <= SMALL_MEMBER else None
            plan.append((key, info, arr))
        for key, info, arr in plan:
            if arr is None:
                try:
                    with zf.open(info) as fh:
                        arr = np.lib.format.read_array(fh, allow_pickle=False)
                except Exception as exc:  # noqa: BLE001 - corrupt payload, CRC, truncation
                    raise _fail(path, key, f"{type(exc).__name__}: {exc}") from None
            if key == METADATA_KEY:
                meta = _parse_meta(path, arr)
            else:
                native = arr.dtype.newbyteorder("=")
                arrays[key] = arr if arr.dtype.isnative else arr.astype(native)
    return Loaded(arrays, meta, os.fspath(path))


def _check_member(path, key, info, shape, dtype, header) -> None:
    """A member's header against its dtype gate, its declared size and its compression."""
    why = dtype_problem(dtype) if key != METADATA_KEY else None
    if why:
        raise _fail(path, key, why)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes != info.file_size - header:
        raise _fail(path, key, f"the header declares shape {shape} of {dtype} "
                               f"({nbytes} bytes) but the member holds "
                               f"{info.file_size - header} bytes")
    if nbytes > BOMB_BYTES and nbytes > BOMB_RATIO * max(info.compress_size, 1):
        raise _fail(path, key, f"the member inflates {info.compress_size} bytes to "
                               f"{nbytes} (more than {BOMB_RATIO}:1 beyond "
                               f"{BOMB_BYTES >> 20} MiB); save such arrays "
                               "uncompressed (np.savez)")


def _payload(path, key, fh, shape, fortran, dtype):
    """The array of a member whose header ``fh`` has just been read."""
    nbytes = math.prod(shape) * dtype.itemsize
    try:
        raw = fh.read(nbytes)
    except Exception as exc:  # noqa: BLE001 - corrupt payload, CRC, truncation
        raise _fail(path, key, f"{type(exc).__name__}: {exc}") from None
    if len(raw) != nbytes:
        raise _fail(path, key, "the data is truncated")
    arr = np.frombuffer(bytearray(raw), dtype=dtype, count=math.prod(shape))
    if fortran:
        return arr.reshape(shape[::-1]).transpose()
    return arr.reshape(shape)


def npz_header(path) -> tuple[list[str], dict]:
    """The array names and the metadata of an ``.npz`` archive, no array inflated (only the
    metadata member, bounded to ``MAX_HEADER`` bytes)."""
    try:
        zf = zipfile.ZipFile(os.fspath(path))
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise _fail(path, None, f"not an npz archive ({exc})") from None
    with zf:
        members = zf.infolist()
        if len(members) > MAX_MEMBERS:
            raise _fail(path, None, f"{len(members)} members; an npz file may hold at most "
                                    f"{MAX_MEMBERS}")
        names = [i.filename.removesuffix(".npy") for i in members]
        meta = {}
        info = next((i for i in members if i.filename == METADATA_KEY + ".npy"), None)
        if info is not None:
            if info.file_size > MAX_HEADER:
                raise _fail(path, METADATA_KEY, "the metadata is too large")
            try:
                with zf.open(info) as fh:
                    arr = np.lib.format.read_array(fh, allow_pickle=False)
            except Exception as exc:  # noqa: BLE001 - corrupt member: the file's fault
                raise _fail(path, METADATA_KEY, f"{type(exc).__name__}: {exc}") from None
            meta = _parse_meta(path, arr)
    return [n for n in names if n != METADATA_KEY], meta


def _parse_meta(path, arr) -> dict:
    if arr.dtype.kind != "U" or arr.shape != () or arr.nbytes > MAX_HEADER:
        raise _fail(path, METADATA_KEY, "metadata must be one string of JSON")
    out = parse_json(path, METADATA_KEY, str(arr[()]))
    return _string_map(path, METADATA_KEY, out)


def _string_map(path, key, out) -> dict:
    if not isinstance(out, dict) or not all(isinstance(v, (str, int, float, bool))
                                            for v in out.values()):
        raise _fail(path, key, "metadata is not a JSON object of strings")
    return {str(k): str(v) for k, v in out.items()}


def parse_json(path, key, text: str, depth: int = MAX_JSON_DEPTH, fail=None):
    """``text`` (a header or metadata of an untrusted file) parsed as JSON, at most ``depth``
    levels of objects and lists deep; else ``fail(why)`` (default: an
    :class:`EvaluationError` naming ``path`` and ``key``)."""
    fail = fail or (lambda why: _fail(path, key, why))
    try:
        out = json.loads(text)
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise fail(f"not readable JSON ({why})") from None
    if _depth(out) > depth:
        raise fail(f"JSON nested more than {depth} levels deep")
    return out


def _depth(doc) -> int:
    best, todo = 0, [(doc, 0)]
    while todo:
        v, d = todo.pop()
        best = max(best, d)
        if isinstance(v, dict):
            todo.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            todo.extend((x, d + 1) for x in v)
    return best


def dtype_problem(dtype) -> str | None:
    """Why an array of ``dtype`` cannot be a parameter, input or tape array (None: it can):
    the one gate every reader of weight files applies. Bool, integer, float and complex
    arrays of either byte order pass (big-endian ones are read in native order); object,
    bytes, unicode, datetime, void and structured arrays do not."""
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        return "object arrays (pickles) are refused"
    if dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in "biufc":
        return f"dtype {dtype.str} ({dtype}) is not a numeric array (bool, int, float, complex)"
    return None


def check_offsets(path, entries, fail=None) -> None:
    """``entries``: ``(key, begin, end)`` byte ranges of a safetensors file's tensors; two
    that overlap are ``fail(key, why)`` (default: an :class:`EvaluationError`; the
    safetensors library refuses them too)."""
    fail = fail or (lambda key, why: _fail(path, key, why))
    last_key, last_end = None, 0
    for key, begin, end in sorted(entries, key=lambda t: (t[1], t[2])):
        if begin < last_end and end > begin:
            raise fail(key, f"data offsets [{begin}, {end}] overlap those of "
                                   f"{last_key!r} (ending at {last_end})")
        if end > last_end:
            last_key, last_end = key, end


# --------------------------------------------------------------------------- safetensors


def read_safetensors(path, budget: int | None = None) -> Loaded:
    """Every tensor of a safetensors file, its JSON header checked before the data is read;
    BF16/F8 decoded through ml_dtypes."""
    budget = available_bytes() if budget is None else budget
    try:
        with open(os.fspath(path), "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(8)
            if len(head) < 8:
                raise _fail(path, None, "too short for a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if n > min(size - 8, 100 << 20):
                raise _fail(path, None, f"the header claims {n} bytes; the file has {size}")
            header = parse_json(path, None, fh.read(n).decode("utf-8"), SAFETENSORS_DEPTH)
            if not isinstance(header, dict):
                raise _fail(path, None, "the header is not a JSON object")
            meta = _string_map(path, "__metadata__", header.pop("__metadata__", None) or {})
            data_len = size - 8 - n
            entries, total = [], 0
            for key, e in header.items():
                dtype, shape, begin, end = _entry(path, key, e, data_len)
                total += _decoded_bytes(shape, np.float64)
                if total > budget:
                    raise _fail(path, key, f"shape {shape}: the arrays would take {total} "
                                           f"bytes, beyond the {budget} available")
                entries.append((key, dtype, shape, begin, end))
            check_offsets(path, [(k, b, e) for k, _d, _s, b, e in entries])
            arrays = {}
            for key, dtype, shape, begin, end in sorted(entries, key=lambda t: t[3]):
                fh.seek(8 + n + begin)
                raw = fh.read(end - begin)
                if len(raw) != end - begin:
                    raise _fail(path, key, "the data is truncated")
                npd = _ml_dtype(dtype) if dtype in _ML else np.dtype(_PLAIN[dtype])
                arr = np.frombuffer(raw, dtype=npd.newbyteorder("<")).reshape(shape)
                arrays[key] = arr.astype(np.float64) if dtype in _ML else arr.copy()
    except EvaluationError:
        raise
    except (OSError, ValueError, UnicodeDecodeError, struct.error) as exc:
        raise _fail(path, None, f"{type(exc).__name__}: {exc}") from None
    return Loaded(arrays, meta, os.fspath(path))


def _entry(path, key, e, data_len):
    if not isinstance(e, dict):
        raise _fail(path, key, "a header entry is not an object")
    dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
    if dtype not in _PLAIN and dtype not in _ML:
        raise _fail(path, key, f"unsupported dtype {_show(dtype)}")
    if not (isinstance(shape, list) and all(type(d) is int and 0 <= d < 2**63 for d in shape)):
        raise _fail(path, key, f"malformed shape {_show(shape)}")
    if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs)
            and 0 <= offs[0] <= offs[1] <= data_len):
        raise _fail(path, key, f"data offsets {_show(offs)} outside the {data_len} data bytes")
    item = _ITEMSIZE[dtype] if dtype in _ITEMSIZE else np.dtype(_PLAIN[dtype]).itemsize
    if math.prod(shape) * item != offs[1] - offs[0]:
        raise _fail(path, key, f"shape {shape} of {dtype} needs {math.prod(shape) * item} "
                               f"bytes; the offsets give {offs[1] - offs[0]}")
    return dtype, tuple(shape), offs[0], offs[1]


# --------------------------------------------------------------------------- public API


def load_params(path, budget: int | None = None) -> Loaded:
    """Read a parameter (or inputs, or tape) file; see the module docstring."""
    ext = _format(path)
    if ext == ".npz":
        return read_npz(path, budget)
    return read_safetensors(path, budget)


def storage_of(datatype) -> str | None:
    """The safetensors dtype an array of ``datatype`` is stored in (None: float64 & co)."""
    if isinstance(datatype, Quantified) and datatype.scale is None:
        return STORAGE.get(datatype.form.value)
    return None


def _stored(key, v, storage):
    """``v`` in its storage dtype when that holds it exactly (never loses a bit), else as
    given; and the safetensors dtype name used (None: numpy's own)."""
    a = np.ascontiguousarray(np.asarray(v))
    if (storage in _ML or storage in ("F16", "F32")) and np.issubdtype(a.dtype, np.floating):
        dt = _ml_dtype(storage) if storage in _ML else np.dtype(_PLAIN[storage])
        with np.errstate(over="ignore", invalid="ignore"):
            cast = a.astype(dt)
            back = cast.astype(a.dtype)
        if np.array_equal(back, a, equal_nan=True):
            return cast, storage
    return a, None


def save_params(params: dict, path, storage: dict | None = None,
                metadata: dict | None = None) -> None:
    """Write ``params`` to ``path`` (format by extension). ``storage`` maps keys to the
    safetensors dtype they are kept in (:func:`storage_of`); ``metadata`` (str -> str) is
    stored with them."""
    ext = _format(path)
    storage = storage or {}
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    if any(storage.values()):
        meta["ncdc.storage"] = json.dumps({k: v for k, v in storage.items() if v},
                                          sort_keys=True)
    if ext == ".npz":
        arrays = {}
        for k, v in params.items():
            a, st = _stored(k, v, storage.get(k))
            arrays[k] = a.astype(np.float32) if st in _ML else a  # npy has no BF16/FP8 dtype
        if METADATA_KEY in arrays:
            raise EvaluationError(f"{METADATA_KEY!r} is reserved for the file's metadata")
        arrays[METADATA_KEY] = np.array(json.dumps(meta, sort_keys=True))
        np.savez(path, **arrays)
        return
    from safetensors.numpy import save_file

    tensors = {}
    for k, v in params.items():
        a = _stored(k, v, storage.get(k))[0]
        if np.iscomplexobj(a):
            raise EvaluationError(f"parameter {k!r} is complex; safetensors cannot hold it "
                                  "(use .npz)")
        tensors[k] = a
    try:
        save_file(tensors, os.fspath(path), metadata=meta or None)
    except (ValueError, TypeError) as exc:
        raise EvaluationError(f"cannot write {os.fspath(path)!r}: {exc}") from None


def file_metadata(spec_hash: str, binding: dict, quant: str, version: str) -> dict:
    """The metadata a weights file carries (all strings, as safetensors requires)."""
    return {"ncdc.spec_sha256": spec_hash,
            "ncdc.binding": json.dumps(binding, sort_keys=True),
            "ncdc.quant": quant, "ncdc.version": version}


def compare_metadata(found: dict, expected: dict) -> list[str]:
    """What differs between a file's metadata and the run loading it, one line each (a file
    without metadata gives one line saying so)."""
    if not any(k.startswith("ncdc.") for k in found):
        return ["the file carries no ncdc metadata (spec, binding, quant mode, version)"]
    out = []
    for k, want in expected.items():
        got = found.get(k)
        if got == want:
            continue
        if k == "ncdc.binding":
            try:
                a, b = json.loads(got or "{}"), json.loads(want)
            except ValueError:
                out.append(f"{k}: the file's binding is unreadable")
                continue
            diff = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
            out.append("binding differs: " + ", ".join(
                f"{n}={a.get(n, '-')} in the file, {b.get(n, '-')} now" for n in diff[:8]))
        else:
            out.append(f"{k.removeprefix('ncdc.')}: {got!r} in the file, {want!r} now")
    return out


def audit(arrays: dict, expected_keys) -> list[str]:
    """Warnings about a file's content: keys no array of the run uses, non-finite values."""
    expected = set(expected_keys)
    out = []
    extra = sorted(k for k in arrays if k not in expected)
    if extra:
        out.append(f"{len(extra)} key(s) not used by this block: "
                   + ", ".join(repr(k) for k in extra[:5]) + (" ..." if len(extra) > 5 else ""))
    for k in sorted(arrays):
        a = arrays[k]
        if np.issubdtype(a.dtype, np.inexact) and a.size and not np.isfinite(a).all():
            out.append(f"{k!r} holds NaN or infinite values")
    return out


__all__ = ["FORMATS", "METADATA_KEY", "Loaded", "audit", "available_bytes", "compare_metadata",
           "file_metadata", "load_params", "npz_header", "read_npz", "read_safetensors", "save_params",
           "storage_of"]
