"""The process's own memory counters (Linux /proc), as every measurement here reads them."""
from __future__ import annotations


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
