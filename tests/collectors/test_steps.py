import json
import socket
import time

import pytest

from collectors.base import CollectorError
from collectors.steps import StepReceiver, StepReporter, parse_addr
from tests.collectors.conftest import assert_valid
from tests.fixtures.ports import free_port


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_reporter_without_listener_never_blocks_or_raises():
    rep = StepReporter("j1", 0, addr=("127.0.0.1", free_port(socket.SOCK_DGRAM)))
    start = time.perf_counter()
    for step in range(2000):
        with rep.step(step):
            with rep.phase("compute"):
                pass
    assert time.perf_counter() - start < 2.0
    assert rep.sent + rep.errors == 2000  # each attempt either left or was counted as an error


def test_reporter_with_unusable_address_disables_itself(monkeypatch):
    monkeypatch.setenv("GOODPUT_STEP_ADDR", "nonsense")
    rep = StepReporter("j1", 0)
    with rep.step(1):
        pass
    assert rep.errors == 1 and "host:port" in rep.last_error and rep.sent == 0
    rep = StepReporter("j1", 0, addr=("no-such-host.invalid", 9))  # resolved once, at construction
    with rep.step(1):
        pass
    assert rep.errors == 1 and rep.sent == 0


def test_rows_arrive_with_phases():
    recv = StepReceiver(("127.0.0.1", 0))
    clock = Clock()
    rep = StepReporter(
        "job-9", 3, attempt=2, gpu=1, addr=recv.addr, clock=clock, wall=lambda: 1_700_000_000.5
    )
    with rep.step(41):
        with rep.phase("data"):
            clock.t += 0.010
        with rep.phase("compute"):
            clock.t += 0.200
        with rep.phase("comm"):
            clock.t += 0.030
        with rep.phase("comm"):
            clock.t += 0.005
        clock.t += 0.001
    with rep.step(42):
        with rep.phase("checkpoint"):
            clock.t += 1.5
    time.sleep(0.05)
    rows, rejected = recv.drain()
    assert rejected == [] and rep.sent == 2
    assert_valid("step", rows)
    assert rows[0] == {
        "ts_ms": 1_700_000_000_500,
        "job_id": "job-9",
        "rank": 3,
        "step": 41,
        "attempt": 2,
        "gpu": 1,
        "duration_ms": pytest.approx(246.0),
        "data_ms": pytest.approx(10.0),
        "compute_ms": pytest.approx(200.0),
        "comm_ms": pytest.approx(35.0),
    }
    assert rows[1]["checkpoint_ms"] == pytest.approx(1500.0) and "data_ms" not in rows[1]
    assert recv.drain() == ([], [])
    recv.close()


def test_failed_step_is_not_reported_and_the_exception_is_the_trainers():
    recv = StepReceiver(("127.0.0.1", 0))
    rep = StepReporter("j", 0, addr=recv.addr)
    with pytest.raises(ZeroDivisionError):
        with rep.step(1):
            raise ZeroDivisionError
    with rep.phase("data"):  # outside a step: just runs
        pass
    time.sleep(0.02)
    assert recv.collect(0) == [] and rep.sent == 0
    recv.close()


def test_malformed_datagrams_rejected_with_reasons():
    recv = StepReceiver(("127.0.0.1", 0))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    good = {"ts_ms": 1, "job_id": "j", "rank": 0, "step": 5, "duration_ms": 12.5}
    for payload in [
        b"\xff\xfe",
        b"not json",
        b"[]",
        json.dumps({**good, "rank": -1}).encode(),
        json.dumps({**good, "duration_ms": "fast"}).encode(),
        json.dumps({**good, "loss": 0.1}).encode(),
        json.dumps({k: v for k, v in good.items() if k != "step"}).encode(),
        json.dumps(good).encode(),
    ]:
        s.sendto(payload, recv.addr)
    s.close()
    time.sleep(0.05)
    rows = recv.collect(0)
    reasons = [r["reason"] for r in recv.rejected]
    assert rows == [good] and len(reasons) == 7
    assert "not JSON" in reasons[0] and "not JSON" in reasons[1] and "JSON object" in reasons[2]
    assert "minimum" in reasons[3] and "must be float" in reasons[4] and "unknown field" in reasons[5]
    assert "missing required field 'step'" in reasons[6]
    recv.close()


def test_receiver_bind_failure_and_addr_parsing():
    recv = StepReceiver(("127.0.0.1", 0))
    with pytest.raises(CollectorError, match="cannot bind"):
        StepReceiver(recv.addr)
    recv.close()
    assert parse_addr("127.0.0.1:9478") == ("127.0.0.1", 9478)
    for bad in ("9478", "host:", ":1", "h:99999"):
        with pytest.raises(ValueError):
            parse_addr(bad)
