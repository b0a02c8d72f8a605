"""Progress of the long commands (demo, ingest --from, the Kafka backfill, analyze), drawn by tqdm.

On a terminal it is tqdm's bar. Elsewhere (CI logs, the journal, a file) tqdm is off, since its
carriage-return redraws make a log unreadable, and the same progress comes as plain lines instead: one
per named step, one per tenth of a quantity. Either way `done` ends with one line saying what was done
and how long it took, which the logs (and tests) read.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm


class Progress:
    def __init__(
        self,
        label: str,
        total: float,
        *,
        unit: str = "it",
        unit_scale: bool = False,
        stream: TextIO | None = None,
        quiet: bool = False,
    ) -> None:
        self.label, self.total = label, total
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.plain = not quiet and not self.stream.isatty()
        self.started = time.perf_counter()
        self.position: float = 0
        self._decile = 0
        self._bar = tqdm(
            total=total,
            desc=label,
            unit=unit,
            unit_scale=unit_scale,
            file=self.stream,
            disable=quiet or self.plain,
            leave=False,
            dynamic_ncols=True,
        )

    def update(self, done: float, note: str = "", total: float | None = None) -> None:
        """Moves to `done`; `total` moves the goal, for work that grows while it runs (a backfill
        catching up on lag)."""
        if total is not None:
            self.total = self._bar.total = total
        self._advance(done - self.position, note)
        decile = int(10 * done / self.total) if self.total else 10
        if self.plain and decile > self._decile:
            self._decile = decile
            self._line(f"{min(done / self.total, 1.0) if self.total else 1.0:.0%} {note}")

    def grow(self, steps: int) -> None:
        """More steps became known (the analyzers learn how many rollup statements only on the way)."""
        self.total = self._bar.total = self.total + steps

    def step(self, name: str) -> None:
        """One named step done: a line of its own when not on a terminal."""
        self._advance(1, name)
        if self.plain:
            self._line(f"{self.position:g}/{self.total:g} {name}")

    def done(self, note: str = "") -> float:
        """Closes the bar and writes the summary line; returns the seconds since the start."""
        elapsed = time.perf_counter() - self.started
        self._bar.close()
        if not self.quiet:
            self.stream.write(f"{self.label}: done in {elapsed:.1f}s {note}".rstrip() + "\n")
            self.stream.flush()
        return elapsed

    def _advance(self, by: float, note: str) -> None:
        self.position += by
        self._bar.set_postfix_str(note, refresh=False)
        self._bar.update(by)

    def _line(self, text: str) -> None:
        self.stream.write(f"{self.label}: {text} after {time.perf_counter() - self.started:.1f}s\n")
        self.stream.flush()
