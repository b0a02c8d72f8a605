"""The suite's port chooser (tests/fixtures/ports.py): ports that no port-0 bind can be given meanwhile."""

import socket

from tests.fixtures import ports


def test_ports_lie_below_the_ephemeral_range_and_never_repeat():
    first, second = ports.free_ports(50), ports.free_ports(50)
    chosen = first + second
    assert len(set(chosen)) == 100
    assert all(ports.LOWEST_PORT <= p < ports.ephemeral_low() for p in chosen)
    # what the kernel gives a bind to port 0 (the race CI lost) can never be one of them
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert s.getsockname()[1] >= ports.ephemeral_low()


def test_a_port_someone_holds_is_passed_over(monkeypatch):
    taken = ports.free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", taken))
        monkeypatch.setattr(ports._pick, "randrange", lambda n: taken - ports.LOWEST_PORT)  # walk from it
        monkeypatch.setattr(ports, "_handed_out", set())
        got = ports.free_ports(3)
        assert taken not in got  # the walk started at it: a chooser that skipped no check would return it
        udp = ports.free_port(socket.SOCK_DGRAM)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", udp))
