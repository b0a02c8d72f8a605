"""Visible progress for long work: an in-place bar on a terminal, a line per 10 % elsewhere (CI logs)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, label: str, total: float, stream=sys.stderr) -> None:
        self.label, self.total, self.stream = label, max(total, 1e-9), stream
        self.tty = stream.isatty()
        self.started = time.perf_counter()
        self._last_decile = -1

    def update(self, done: float, note: str = "", total: float | None = None) -> None:
        """`total` moves the goal, for work that grows while it runs (a backfill catching up on lag)."""
        if total is not None:
            self.total = max(total, 1e-9)
        frac = min(1.0, done / self.total)
        elapsed = time.perf_counter() - self.started
        if self.tty:
            bar = "#" * int(frac * 30)
            self.stream.write(f"\r{self.label:<12} [{bar:<30}] {frac:6.1%} {elapsed:6.1f}s {note}")
            self.stream.flush()
        elif int(frac * 10) > self._last_decile:
            self._last_decile = int(frac * 10)
            self.stream.write(f"{self.label}: {frac:.0%} after {elapsed:.1f}s {note}\n")
            self.stream.flush()

    def done(self, note: str = "") -> float:
        elapsed = time.perf_counter() - self.started
        if self.tty:
            self.stream.write("\n")
        self.stream.write(f"{self.label}: done in {elapsed:.1f}s {note}\n")
        self.stream.flush()
        return elapsed
