"""Training-step events: a reporter for the training loop and the agent's receiver, over local UDP.

The reporter is what a training script imports (`from collectors.steps import StepReporter`), so it
depends on nothing outside the standard library and must never slow or break the loop: one
non-blocking `sendto` per step, every error counted and swallowed. UDP because a missing or slow agent
must cost the trainer nothing (no connection, no back-pressure); loss of a datagram costs one step's
detail, which the analysis tolerates.

    reporter = StepReporter(job_id=os.environ["SLURM_JOB_ID"], rank=rank, gpu=local_rank)
    for step in range(start, steps):
        with reporter.step(step):
            with reporter.phase("data"):
                batch = next(loader)
            with reporter.phase("compute"):
                loss = model(batch); loss.backward()
            with reporter.phase("comm"):
                wait_for_allreduce()

The datagram is one JSON object with the schema.STEP fields; `ts_ms` is the step's end.
"""

from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from collectors.base import CollectorError, Row
from collectors.rows import decode_row

DEFAULT_ADDR = ("127.0.0.1", 9478)
ADDR_ENV = "GOODPUT_STEP_ADDR"
PHASES = {"data": "data_ms", "compute": "compute_ms", "comm": "comm_ms", "checkpoint": "checkpoint_ms"}
MAX_DATAGRAM = 8192
MAX_PER_DRAIN = 100_000  # bound one drain so a flood cannot hold the agent's tick


def parse_addr(text: str) -> tuple[str, int]:
    """`host:port` (IPv4 or name) -> (host, port); ValueError when malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected host:port, got {text!r}")
    return host, int(port)


class StepReporter:
    """Sends one datagram per step to the local agent; never blocks, never raises into the caller.

    `addr`: (host, port); default from $GOODPUT_STEP_ADDR, else 127.0.0.1:9478. `clock` (seconds,
    monotonic) times phases; `wall` (seconds since the epoch) stamps `ts_ms`. `sent` and `errors`
    count datagrams handed to the kernel and failures (including an unusable address).
    """

    def __init__(
        self,
        job_id: str,
        rank: int,
        *,
        attempt: int | None = None,
        gpu: int | None = None,
        addr: tuple[str, int] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.job_id, self.rank, self.attempt, self.gpu = str(job_id), int(rank), attempt, gpu
        self.clock, self.wall = clock, wall
        self.sent = self.errors = 0
        self.last_error: str | None = None
        self._phases: dict[str, float] | None = None
        self._sock: socket.socket | None = None
        try:
            host, port = addr or (
                parse_addr(os.environ[ADDR_ENV]) if ADDR_ENV in os.environ else DEFAULT_ADDR
            )
            # resolve once here: a name in sendto would mean a (blocking) DNS lookup on every step
            self.addr = (socket.gethostbyname(host), port)
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
        except (OSError, ValueError) as e:
            self._fail(f"step reporter disabled: {e}")

    def _fail(self, why: str) -> None:
        self.errors += 1
        self.last_error = why

    @contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Times one step; sends its event when the body completes (a step that raised is not one)."""
        self._phases = dict.fromkeys(PHASES, 0.0)
        start = self.clock()
        try:
            yield
        finally:
            phases, self._phases = self._phases, None
        self._send(step, (self.clock() - start) * 1000.0, phases)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Adds the body's time to phase `name` (data, compute, comm, checkpoint) of the current step;
        outside a step, or for an unknown name, it only runs the body."""
        start = self.clock()
        try:
            yield
        finally:
            if self._phases is not None and name in self._phases:
                self._phases[name] += (self.clock() - start) * 1000.0

    def _send(self, step: int, duration_ms: float, phases: dict[str, float]) -> None:
        if self._sock is None:
            return
        try:
            row: dict[str, Any] = {
                "ts_ms": int(self.wall() * 1000),
                "job_id": self.job_id,
                "rank": self.rank,
                "step": int(step),
                "duration_ms": round(duration_ms, 3),
            }
            if self.attempt is not None:
                row["attempt"] = int(self.attempt)
            if self.gpu is not None:
                row["gpu"] = int(self.gpu)
            row.update({PHASES[p]: round(ms, 3) for p, ms in phases.items() if ms > 0})
            self._sock.sendto(json.dumps(row, separators=(",", ":")).encode(), self.addr)
            self.sent += 1
        except Exception as e:  # noqa: BLE001 — by contract nothing may reach the training loop
            self._fail(f"{type(e).__name__}: {e}")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class StepReceiver:
    """The agent's end: a non-blocking UDP socket bound to `bind_addr` (port 0: any free port).

    Also a Collector of kind "step": `collect` returns `drain()`'s rows and keeps its rejects in
    `rejected` for the agent to count and log.
    """

    name = "steps"
    kind = "step"

    def __init__(self, bind_addr: tuple[str, int] = DEFAULT_ADDR) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.bind(bind_addr)
        except OSError as e:
            self.sock.close()
            raise CollectorError(
                f"cannot bind the step receiver to {bind_addr[0]}:{bind_addr[1]}: {e}"
            ) from e
        self.sock.setblocking(False)
        self.addr: tuple[str, int] = self.sock.getsockname()
        self.rejected: list[dict[str, str]] = []

    def drain(self) -> tuple[list[Row], list[dict[str, str]]]:
        """Every datagram pending now: the valid rows, and the rest as {"datagram", "reason"}."""
        rows, rejected = [], []
        for _ in range(MAX_PER_DRAIN):
            try:
                data = self.sock.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                rejected.append({"datagram": "", "reason": f"recv failed: {e}"})
                break
            row, reason = decode_row("step", data)
            if reason is None:
                rows.append(row)
            else:
                rejected.append({"datagram": data[:200].decode(errors="replace"), "reason": reason})
        return rows, rejected

    def collect(self, now_ms: int) -> list[Row]:
        rows, self.rejected = self.drain()
        return rows

    def close(self) -> None:
        self.sock.close()
