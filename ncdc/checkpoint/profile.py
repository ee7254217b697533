"""Time and peak resident memory of each block of a forward pass, through forward hooks.

Peak RSS of a block is the largest resident set while it ran. Linux keeps one high-water mark
per process (``VmHWM``) and resets it when ``5`` is written to ``/proc/self/clear_refs``; every
block entry and exit reads the mark into all blocks then running and resets it, so nested blocks
each get their own peak. Where the mark cannot be reset, the figure is the process's peak so far
(``ru_maxrss``), an upper bound.
"""
from __future__ import annotations

import resource
import time
from dataclasses import dataclass


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes() -> int:
    """The current resident set (0 when unknown)."""
    kib = _status_kib("VmRSS")
    return 0 if kib is None else kib * 1024


def peak_bytes() -> int:
    """The process's peak resident set since start (or the last reset)."""
    kib = _status_kib("VmHWM")
    if kib is None:
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024


def reset_peak() -> bool:
    """Reset the high-water mark; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


@dataclass
class BlockTime:
    name: str
    calls: int = 0
    seconds: float = 0.0
    peak: int = 0


class Profiler:
    """Forward hooks on ``module``'s submodules down to ``depth`` (containers and plain
    ``nn.Linear`` layers excluded): :attr:`rows` in first-call order."""

    def __init__(self, module, depth: int = 2):
        from torch import nn

        self.rows: dict[str, BlockTime] = {}
        self._open: list[tuple[str, float]] = []
        self._handles = []
        self.resettable = reset_peak()
        for name, m in module.named_modules():
            level = 0 if not name else name.count(".") + 1
            if level > depth or isinstance(m, (nn.ModuleList, nn.ModuleDict, nn.Sequential,
                                               nn.Linear)):
                continue
            label = name or type(m).__name__
            self._handles.append(m.register_forward_pre_hook(self._enter(label)))
            self._handles.append(m.register_forward_hook(self._leave(label), always_call=True))

    def _mark(self) -> None:
        """Fold the high-water mark into every running block, then reset it."""
        if not self._open:
            reset_peak()
            return
        hwm = peak_bytes()
        for label, _ in self._open:
            row = self.rows[label]
            row.peak = max(row.peak, hwm)
        if self.resettable:
            reset_peak()

    def _enter(self, label):
        def hook(_module, _args):
            self._mark()
            self.rows.setdefault(label, BlockTime(label))
            self._open.append((label, time.perf_counter()))
        return hook

    def _leave(self, label):
        def hook(_module, _args, _out):
            self._mark()
            while self._open:
                name, t0 = self._open.pop()
                row = self.rows[name]
                row.calls += 1
                row.seconds += time.perf_counter() - t0
                if name == label:
                    break
        return hook

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


__all__ = ["BlockTime", "Profiler", "peak_bytes", "reset_peak", "rss_bytes"]
