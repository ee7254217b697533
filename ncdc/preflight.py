"""Memory preflight: estimate what a command will allocate from the cost model (``ir/cost.py``)
before allocating anything, and refuse with a :class:`MemoryBudgetError` naming the estimate,
the largest arrays and how to shrink them when it exceeds the memory available (``MemAvailable``
of ``/proc/meminfo``, or psutil's figure when psutil is installed) or ``--max-memory``.

The estimate of one numpy interpreter run (an upper bound in the measured cases, see
``tests/test_preflight.py``):

* every learned and fixed array in float64 / int64 (complex128: 16 bytes), plus the largest one
  again (initialisation or loading converts through a temporary of that size);
* the three largest arrays the morphism materialises, each with its liveness mask (9 bytes per
  element, 17 complex): an operator's operands, its result and a gather temporary;
* ``OVERHEAD`` bytes for the interpreter's own working set.

A generated PyTorch module (``check``) adds its parameters at the torch dtype's width and the
same activations again.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

import sympy

from ncdc.ir.cost import ArrayCost, Cost, ParamCost, cost
from ncdc.ir.datatypes import kind
from ncdc.ir.env import Env
from ncdc.ir.errors import EvaluationError

OVERHEAD = 64 * 2**20
"""Bytes of the interpreter's own working set (code, caches) counted on top of the arrays."""

_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "kb": 10**3, "m": 2**20, "mib": 2**20,
          "mb": 10**6, "g": 2**30, "gib": 2**30, "gb": 10**9, "t": 2**40, "tib": 2**40,
          "tb": 10**12}


class MemoryBudgetError(EvaluationError):
    """A command would need more memory than is available or allowed; nothing was allocated."""


def parse_size(text: str) -> int:
    """Bytes of ``2GiB``, ``500MB``, ``1.5G`` or ``1000000``: KB/MB/GB/TB are decimal,
    KiB/MiB/GiB/TiB and bare K/M/G/T binary."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*", text or "")
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise EvaluationError(f"--max-memory {text!r}: expected a size such as 2GiB, 500MB or "
                              "1000000 (bytes)")
    value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise EvaluationError(f"--max-memory {text!r}: must be positive")
    return value


def available_memory(meminfo: str = "/proc/meminfo",
                     cgroup: str = "/sys/fs/cgroup") -> tuple[int, str] | None:
    """(bytes, where the figure comes from) of the memory available to a new allocation: psutil's
    figure when psutil is installed, else ``MemAvailable`` of ``meminfo``; lowered to what a
    cgroup v2 limit leaves (``memory.max - memory.current``) when one is set. None if unknown."""
    found: list[tuple[int, str]] = []
    try:
        import psutil  # optional
    except ImportError:
        psutil = None
    if psutil is not None:
        found.append((int(psutil.virtual_memory().available), "psutil available memory"))
    else:
        try:
            with open(meminfo, encoding="ascii") as fh:
                for line in fh:
                    if line.startswith("MemAvailable:"):
                        found.append((int(line.split()[1]) * 1024,
                                      f"MemAvailable in {meminfo}"))
                        break
        except (OSError, ValueError, IndexError):
            pass
    try:
        with open(os.path.join(cgroup, "memory.max"), encoding="ascii") as fh:
            limit = fh.read().strip()
        with open(os.path.join(cgroup, "memory.current"), encoding="ascii") as fh:
            used = int(fh.read().strip())
        if limit != "max":
            found.append((max(int(limit) - used, 0), f"cgroup limit in {cgroup}"))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def human(n: float) -> str:
    """Bytes as text in binary units: ``1.5 GiB``."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


@dataclass(frozen=True)
class Item:
    """One array of the estimate: what it is, its element count and bytes (all copies)."""

    what: str
    shape: tuple[int, ...]
    bytes: int


@dataclass(frozen=True)
class Estimate:
    """Peak bytes a command is expected to need, and the arrays that make it up."""

    total: int
    params: int
    activations: int
    items: tuple[Item, ...]

    def largest(self, n: int = 3) -> list[Item]:
        return sorted(self.items, key=lambda i: -i.bytes)[:n]


def _num(expr, env: Env) -> int | None:
    val = env.subs(expr)
    if val.free_symbols or not val.is_number:
        return None
    return int(sympy.ceiling(val))


def _width(dt, base: int) -> int:
    k = kind(dt)
    return 8 if k == "natural" else 2 * base if k == "complex" else base


def estimate(morphism, env: Env, *, torch_bytes: int | None = None, c: Cost | None = None,
             held=None) -> Estimate | None:
    """The peak memory of interpreting ``morphism`` under ``env`` (and, with ``torch_bytes``,
    of also running a generated module whose floats are that wide); None when a size is
    unbound (the command then reports the binding error itself).

    ``held`` models a runtime that keeps learned weights in a storage format and dequantises
    at use instead of holding float64 copies: a format name for every learned real array, or
    a function from :class:`ir.cost.ParamCost` to a format name (or None: float64). The
    temporary of such an array is then the part one token reads, dequantised to float32."""
    c = c if c is not None else cost(morphism)
    items: list[Item] = []
    params = biggest = 0
    for p in c.params:
        n, count = _num(p.elements, env), _num(p.count, env)
        if n is None or count is None:
            return None
        one = n * _width(p.datatype, 8)
        each = _width(p.datatype, 8) + (_width(p.datatype, torch_bytes) if torch_bytes else 0)
        total = count * n * each
        fmt = (held(p) if callable(held) else held) if p.learned else None
        if fmt is not None and kind(p.datatype) == "real":
            total = _num(p.bytes_at(fmt), env)
            one = 4 * (_num(p.active, env) or 0)  # dequantised at use, a token's part
        params += total
        biggest = max(biggest, one)
        items.append(_param_item(p, env, total))
    arrays: list[tuple[int, ArrayCost]] = []
    for a in c.arrays:
        n = _num(a.elements, env)
        if n is None:
            return None
        arrays.append((n * (_width(a.datatype, 8) + 1), a))
    arrays.sort(key=lambda t: -t[0])
    copies = 2 if torch_bytes else 1
    activations = 0
    for b, a in arrays[:3]:
        activations += copies * b
        items.append(Item(f"array {_array_name(a)}", tuple(_num(x.size, env) or 0
                                                            for x in a.axes), copies * b))
    total = params + biggest + activations + OVERHEAD
    return Estimate(total, params, activations, tuple(items))


def _param_item(p: ParamCost, env: Env, total: int) -> Item:
    shape = tuple(_num(s, env) or 0 for s in p.shape)
    count = _num(p.count, env) or 1
    what = f"parameter {p.name}" + (f" (x{count} iterations)" if count > 1 else "")
    return Item(what, shape, total)


def _array_name(a: ArrayCost) -> str:
    return f"{a.datatype}[{', '.join(x.label for x in a.axes)}] ({a.label})"


def check_budget(est: Estimate | None, *, command: str, max_memory: int | None = None,
                 available: tuple[int, str] | None = None) -> None:
    """Raise :class:`MemoryBudgetError` when ``est`` exceeds ``max_memory`` or the available
    memory (``available``: (bytes, source), default read from the machine)."""
    if est is None:
        return
    limits = []
    if max_memory is not None:
        limits.append((max_memory, f"--max-memory {human(max_memory)}"))
    avail = available if available is not None else available_memory()
    if avail is not None:
        limits.append((avail[0], f"{human(avail[0])} available ({avail[1]})"))
    over = [(n, why) for n, why in limits if est.total > n]
    if not over:
        return
    why = min(over)[1]
    largest = "; ".join(f"{it.what} [{'x'.join(str(d) for d in it.shape) or 'scalar'}] "
                        f"{human(it.bytes)}" for it in est.largest(3))
    message = (f"{command} would need about {human(est.total)} but the limit is {why}; nothing "
               f"was allocated (parameters {human(est.params)}, arrays while running "
               f"{human(est.activations)}). Largest: {largest}. Shrink it: "
               + ("one block (--block B), a smaller preset (--preset medium or tiny) or "
                  "fewer tokens (--size b=N)" if est.params >= est.activations else
                  "fewer tokens (--size b=N), a smaller preset (--preset medium or tiny) or "
                  "one block (--block B)")
               + "; or raise --max-memory if the machine has the memory.")
    raise MemoryBudgetError(message)


def require(morphism, env: Env, *, command: str, max_memory: str | int | None = None,
            torch_bytes: int | None = None, held=None) -> Estimate | None:
    """Estimate (:func:`estimate`, ``torch_bytes`` and ``held`` as there) and check in one call
    (the entry point commands and the API use). Set the environment variable
    ``NCDC_NO_PREFLIGHT=1`` to skip the check of available memory (``max_memory`` still
    applies)."""
    if isinstance(max_memory, str):
        max_memory = parse_size(max_memory)
    est = estimate(morphism, env, torch_bytes=torch_bytes, held=held)
    avail = None
    if os.environ.get("NCDC_NO_PREFLIGHT") == "1":
        avail = (2**63, "NCDC_NO_PREFLIGHT=1")
    check_budget(est, command=command, max_memory=max_memory, available=avail)
    return est


def require_each(morphisms, env: Env, *, command: str, max_memory: str | int | None = None,
                 torch_bytes: int | None = None) -> Estimate | None:
    """:func:`require` for a command that runs ``morphisms`` one after the other: the largest
    estimate decides."""
    if isinstance(max_memory, str):
        max_memory = parse_size(max_memory)
    ests = [estimate(m, env, torch_bytes=torch_bytes) for m in morphisms]
    known = [e for e in ests if e is not None]
    if not known:
        return None
    worst = max(known, key=lambda e: e.total)
    avail = (2**63, "NCDC_NO_PREFLIGHT=1") if os.environ.get("NCDC_NO_PREFLIGHT") == "1" \
        else None
    check_budget(worst, command=command, max_memory=max_memory, available=avail)
    return worst


__all__ = ["OVERHEAD", "Estimate", "Item", "MemoryBudgetError",
           "available_memory", "check_budget", "estimate", "human", "parse_size", "require",
           "require_each"]
