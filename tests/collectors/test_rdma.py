import pytest

from collectors.base import CollectorUnavailable
from collectors.rdma import RdmaCollector, parse_counter, parse_ethtool_pfc, parse_rate, parse_state
from tests.collectors.conftest import T0, assert_golden, assert_valid
from tests.collectors.trees import ETHTOOL, UNREADABLE


class Ethtool:
    """Recorded `ethtool -S` output per tick; remembers what was run."""

    def __init__(self):
        self.tick, self.argv = 0, []

    def __call__(self, argv):
        self.argv.append(tuple(argv))
        return ETHTOOL[self.tick]


def two_ticks(node, **kw):
    ethtool = Ethtool()
    c = RdmaCollector(node(0) / "sys", run_command=ethtool, **kw)
    first = c.collect(T0)
    ethtool.tick = 1
    node(1)
    return c, first, c.collect(T0 + 1000), ethtool


def test_golden_rows(node):
    c, first, second, _ = two_ticks(node, pfc_netdevs={"mlx5_1": "ens1f1np1"})
    assert_valid("nic", first + second)
    assert_golden("rdma", first + second)


def test_rates_wrap_saturation_and_absent_fields(node):
    c, first, second, ethtool = two_ticks(node, pfc_netdevs={"mlx5_1": "ens1f1np1"})
    assert [(r["device"], r["port"]) for r in second] == [("mlx5_0", 1), ("mlx5_1", 1)]
    assert not any(k.endswith("_per_s") for r in first for k in r)  # no rate from one reading
    ib, roce = second
    assert ib["link_layer"] == "InfiniBand" and ib["state"] == "ACTIVE" and ib["rate_gbps"] == 400.0
    assert ib["tx_bytes_per_s"] == 250_000_000 * 4  # 4-octet words
    assert ib["xmit_wait_per_s"] == 1000.0  # 32-bit wrap: 4294967000 -> 704
    assert ib["out_of_sequence_per_s"] == 16.0  # 32-bit hw counter wrap
    assert ib["rcv_errors_per_s"] == 5.0  # 65530 -> 65535: reached saturation
    assert "symbol_errors_per_s" not in ib  # pinned at 65535 both ticks: unknown, not zero
    assert "xmit_discards_per_s" not in ib  # N/A (no PMA)
    assert "pfc_pause_rx_per_s" not in ib  # InfiniBand: no ethtool
    assert roce["ecn_marked_per_s"] == 500.0 and roce["cnp_handled_per_s"] == 300.0
    assert "seq_errors_per_s" not in roce  # unreadable file skipped...
    assert roce["out_of_sequence_per_s"] == 0.0  # ...the rest of the port still reported
    assert any(UNREADABLE in s for s in c.skipped)
    assert roce["pfc_pause_rx_per_s"] == 510.0  # 500 on prio 3 + 10 on prio 4
    assert roce["pfc_pause_us_per_s"] == 30200.0
    assert ethtool.argv == [("ethtool", "-S", "ens1f1np1")] * 2


def test_no_command_runs_unless_configured(node):
    _, _, second, ethtool = two_ticks(node)
    assert ethtool.argv == [] and "pfc_pause_rx_per_s" not in second[1]


def test_failing_ethtool_costs_only_the_pfc_fields(node):
    def broken(argv):
        raise OSError("ethtool: command not found")

    c = RdmaCollector(node(0) / "sys", pfc_netdevs={"mlx5_1": "ens1f1np1"}, run_command=broken)
    rows = c.collect(T0)
    assert len(rows) == 2 and any("ethtool -S ens1f1np1" in s for s in c.skipped)


def test_absent_source_and_a_device_without_ports(tmp_path, node):
    with pytest.raises(CollectorUnavailable, match="no RDMA devices"):
        RdmaCollector(tmp_path / "nosys").collect(T0)
    root = node(0) / "sys"
    (root / "class" / "infiniband" / "mlx5_9").mkdir()  # a device dir with no ports/ at all
    c = RdmaCollector(root)
    assert [r["device"] for r in c.collect(T0)] == ["mlx5_0", "mlx5_1"]
    assert any("mlx5_9/ports" in s for s in c.skipped)


def test_parsers():
    assert parse_counter("N/A (no PMA)\n") is None and parse_counter("42\n") == 42
    assert parse_rate("400 Gb/sec (4X NDR)\n") == 400.0 and parse_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate("garbage") is None
    assert parse_state("4: ACTIVE\n") == "ACTIVE" and parse_state("1: DOWN") == "DOWN"
    pfc = parse_ethtool_pfc(ETHTOOL[1])
    assert pfc["pause"][3] == 1500 and pfc["duration"][4] == 200 and len(pfc["pause"]) == 8
