"""The process's own memory counters (Linux /proc), as every measurement here reads them."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def status_bytes(field: str) -> int:
    """A /proc/self/status counter (VmRSS, VmHWM, ...) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} missing from /proc/self/status")


def reset_hwm() -> None:
    """Reset VmHWM to the current RSS ("5" into clear_refs, Linux >= 4.0), so a step's high-water mark is its own."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def trim_heap() -> bool:
    """Give glibc's free heap pages back to the OS: ``malloc_trim(0)`` releases the free top of every arena and
    ``MADV_DONTNEED``s every whole free page inside them (glibc >= 2.8). Freed blocks under the mmap threshold stay
    resident otherwise (glibc trims an arena only when a large free reaches its top), so an RSS read right after a
    step counts memory no tensor holds. The free lists are left as they are: the next allocations land at the same
    addresses, only their pages fault in again. False where the C library has no malloc_trim (nothing done)."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True


@dataclass
class StepMemory:
    """One measured call: ``pre`` the RSS it started from (after trimming, if asked), ``hwm`` the high-water mark
    during it, ``trimmed`` the free heap bytes handed back before it (RSS before minus after the trim)."""

    pre: int
    hwm: int
    trimmed: int
    result: Any = None

    @property
    def peak(self) -> int:
        """What the call added to the process at its high-water mark."""
        return self.hwm - self.pre


def measure_call(fn: Callable[[], Any], *, trim: bool = True) -> StepMemory:
    """Run ``fn`` once and read its memory: trim the heap (``trim``), read RSS, reset VmHWM, call, read VmHWM.

    Why trim: without it the baseline RSS holds the previous step's freed-but-resident heap blocks (tensors under
    the 128 KiB mmap threshold that ``measure`` pins), which this step then reuses without growing RSS, so its peak
    read low by however much of that slack happened to be left (0-8 MiB seen on a 2-image-chunk ResNet-18 plan), and
    differently at every step. Trimmed, the baseline holds only pages with live data on them, and the peak counts
    every page the step touches above it, heap pages included (docs/notes/peakjump.md)."""
    before = status_bytes("VmRSS")
    if trim:
        trim_heap()
    pre = status_bytes("VmRSS")
    reset_hwm()
    result = fn()
    hwm = status_bytes("VmHWM")
    return StepMemory(pre=pre, hwm=hwm, trimmed=max(0, before - pre), result=result)
