"""Runs a run's statements in their order, or several at once where the order allows it.

A live run's statements are small: much of each one's time is the engine planning it on one thread, and
many leave the second core idle (docs/performance.md: 3.7 CPU-s in 2.6 s at 10,240 GPUs). Two that share
no table written by either give the same tables run at once as one after the other, so a statement
starts as soon as no statement before it that is still running or waiting writes a table it names, or
names the table it writes. The order of the SQL files stays the only order that matters, and a
statement whose verb does not say what it writes waits for all before it, and all after it for it.
A statement in parts is expanded as it starts, its parts' number read off a table made before it
(`Statement.reads`): it waits for that table, not for every statement before it, so the widest statement
of a live run starts while the fabric's windows are still read beside it.
A DELETE starts only once every statement before it has ended: what it removes is a run's output,
replaced by the INSERT that follows it in the file, and readers (the exporter, the dashboards) would
otherwise see those rows gone for the whole run, not for the DELETE's time. It takes no worker: a
lightweight delete is a mutation the engine's background pool applies while the statement waits for it,
and it waits long where that pool is busy with the table's merges (0.3-1.1 s in 1 to 3 of 12 live runs
in a row, docs/performance.md) while the statements after it could use the cores.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

_WRITES = re.compile(
    r"\s*(?:CREATE OR REPLACE TABLE|INSERT INTO|DELETE FROM|DROP TABLE IF EXISTS"
    r"|TRUNCATE TABLE(?: IF EXISTS)?)"
    r"\s+(\w+)"
)
_NAMES = re.compile(r"\b[A-Za-z_]\w*\b")


@dataclass
class Statement:
    """One statement to run; `label`, when set, is reported once it has run (a statement in parts: its
    last part)."""

    sql: str
    label: str | None = None
    reads: frozenset[str] = frozenset()
    """Tables it depends on that its text does not name: for a statement in parts, the table its parts'
    number is read from when it starts."""
    writes: str | None = field(init=False)
    names: frozenset[str] = field(init=False)
    waits: bool = field(init=False)
    """A DELETE: it waits for the engine's background pool rather than working, so takes no worker."""

    def __post_init__(self) -> None:
        m = _WRITES.match(self.sql)
        self.writes = m[1] if m else None
        self.names = frozenset(_NAMES.findall(self.sql)) | self.reads
        self.waits = self.sql.lstrip().startswith("DELETE FROM")

    def must_follow(self, earlier: Statement) -> bool:
        """Whether this statement must wait for `earlier` to end: one writes a table the other names (any
        identifier of its text: a column that shares a table's name only costs a wait), either's target
        is unknown, or this is a DELETE (it waits for all before it)."""
        if self.writes is None or earlier.writes is None or self.waits:
            return True
        return self.writes in earlier.names or earlier.writes in self.names


def run_statements(
    statements: list[Statement],
    execute: Callable[[str], None],
    workers: int,
    expand: Callable[[Statement], list[Statement]],
    ran: Callable[[Statement], None],
) -> None:
    """Runs `statements` with up to `workers` at once (1: one after the other, in this thread), besides
    any DELETEs (`Statement.waits`), each started once no statement before it that it must follow is
    still to end (`Statement.must_follow`).
    `expand(s)` gives what runs for `s` (its parts, in order), called as `s` is about to start: a statement
    in parts names (or `reads`) every table `expand` reads to count them. `ran(s)` is called in this
    thread as each ends. The first error ends the run: nothing more starts, the running statements end,
    and the error is raised."""
    waiting = list(statements)
    if workers <= 1:
        while waiting:
            for one in expand(waiting.pop(0)):
                execute(one.sql)
                ran(one)
        return
    running: dict[Future, Statement] = {}
    error: BaseException | None = None
    deletes = sum(s.waits for s in statements)
    with ThreadPoolExecutor(max_workers=workers + deletes, thread_name_prefix="analyzer-statement") as pool:
        while (waiting and error is None) or running:
            started = True
            while started and error is None:
                started = False
                working = sum(not r.waits for r in running.values())
                for i, s in enumerate(waiting):
                    if not s.waits and working >= workers:
                        continue
                    if any(s.must_follow(other) for other in (*running.values(), *waiting[:i])):
                        continue
                    waiting[i : i + 1] = expand(s)
                    s = waiting.pop(i)
                    running[pool.submit(execute, s.sql)] = s
                    started = True
                    break
            if not running:
                continue
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                s = running.pop(future)
                if future.exception() is not None:
                    error = error or future.exception()
                else:
                    ran(s)
    if error is not None:
        raise error
