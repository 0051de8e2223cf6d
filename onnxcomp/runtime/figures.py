"""Which memory figure means something under the settings a measurement used."""
from __future__ import annotations

from typing import Any

MiB = 1 << 20


def describe_peaks(result: dict[str, Any]) -> list[str]:
    """Lines for `onnxcomp measure`: per-step peaks, growth over set-up, process peak, and which to read.

    With ORT's CPU arena on, what a step allocates stays reserved for the next one, so every step after the
    first reads ~0 (e.g. [67.6, 0, 0, 0] MiB): only the growth over set-up is meaningful. With it off, each
    step frees what it allocated; the step peak is the step's own footprint and the growth adds what stays
    allocated across steps (gradient buffers, optimizer state, the first step's one-time allocations)."""
    extras = result.get("extras", {})
    steps = [p / MiB for p in extras.get("peak_bytes_per_step", [])]
    warm = [p / MiB for p in extras.get("warmup_peak_bytes", [])]
    lines = ["per-step peaks (warm-up | measured): "
             + " ".join(f"{p:.1f}" for p in warm) + " | " + " ".join(f"{p:.1f}" for p in steps) + " MiB"]
    growth = result["growth_bytes"] / MiB
    process = extras.get("process_peak_bytes")
    lines.append(f"process peak growth over set-up: {growth:,.1f} MiB"
                 + (f"   process peak (whole process, libraries included): {process / MiB:,.1f} MiB" if process else ""))
    trimmed = extras.get("heap_trimmed_bytes_per_step") or []
    if extras.get("heap_trimmed") and len(trimmed) > 1:
        # What the untrimmed baseline used to count as the process's own (measure_call): says how much a step's
        # figure rose for it, and how much free heap the process carries between steps.
        lines.append("free heap handed back before each step (counted in the step's peak, not its baseline): "
                     + " ".join(f"{t / MiB:.1f}" for t in trimmed) + " MiB")
    if result["settings"].get("arena"):
        lines.append("→ the CPU arena is on: it keeps each step's memory for the next, so per-step peaks after "
                     "the first read ~0; the growth over set-up is the figure that means something here")
    else:
        lines.append("→ the CPU arena is off: the training-step peak is the step's own footprint; the growth "
                     "over set-up adds what stays allocated across steps (gradients, optimizer state)")
    return lines
