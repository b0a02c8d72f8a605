"""RDMA ports (InfiniBand and RoCE) from sysfs, plus PFC pause counters from `ethtool -S`.

Reads `<sysfs>/class/infiniband/<dev>/ports/<n>/`: `state`, `rate`, `link_layer`, the PMA counters in
`counters/` and the driver counters in `hw_counters/` (mlx5: transport errors and congestion control).
Only the counters declared in `COUNTERS` are read, each with its real width and overflow behaviour,
because reading a whole mlx5 `hw_counters/` (40+ files) every second costs more than it tells.

PFC pauses are not in sysfs; on RoCE fabrics they are the main congestion signal, so for the netdevs
named in `pfc_netdevs` the collector runs `ethtool -S <netdev>` through an injectable runner (tests feed
recorded output) and sums `rx_prio<p>_pause` and `rx_prio<p>_pause_duration` over priorities.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from collectors.base import CollectorError, CollectorUnavailable, Row
from collectors.counters import Counters, sum_rates
from collectors.files import read_optional


@dataclass(frozen=True, slots=True)
class CounterSpec:
    """One sysfs counter file and the schema field its rate fills."""

    field: str
    file: str
    directory: str  # "counters" (IB PMA) or "hw_counters" (driver)
    width: int
    saturating: bool = False
    scale: float = 1.0


COUNTERS: tuple[CounterSpec, ...] = (
    # Data and packets: the kernel shows the 64-bit PortCountersExtended values where the HCA has them
    # (every mlx5); port_*_data counts 4-octet words.
    CounterSpec("tx_bytes_per_s", "port_xmit_data", "counters", 64, scale=4.0),
    CounterSpec("rx_bytes_per_s", "port_rcv_data", "counters", 64, scale=4.0),
    CounterSpec("tx_packets_per_s", "port_xmit_packets", "counters", 64),
    CounterSpec("rx_packets_per_s", "port_rcv_packets", "counters", 64),
    CounterSpec("xmit_wait_per_s", "port_xmit_wait", "counters", 32),
    # IB PMA error counters saturate at their width's maximum instead of wrapping.
    CounterSpec("symbol_errors_per_s", "symbol_error", "counters", 16, saturating=True),
    CounterSpec("rcv_errors_per_s", "port_rcv_errors", "counters", 16, saturating=True),
    CounterSpec("xmit_discards_per_s", "port_xmit_discards", "counters", 16, saturating=True),
    CounterSpec("link_downed_per_s", "link_downed", "counters", 8, saturating=True),
    # mlx5 driver counters: congestion control is 64-bit, transport errors 32-bit and wrap.
    CounterSpec("ecn_marked_per_s", "np_ecn_marked_roce_packets", "hw_counters", 64),
    CounterSpec("cnp_sent_per_s", "np_cnp_sent", "hw_counters", 64),
    CounterSpec("cnp_handled_per_s", "rp_cnp_handled", "hw_counters", 64),
    CounterSpec("out_of_sequence_per_s", "out_of_sequence", "hw_counters", 32),
    CounterSpec("seq_errors_per_s", "packet_seq_err", "hw_counters", 32),
    CounterSpec("ack_timeouts_per_s", "local_ack_timeout_err", "hw_counters", 32),
    CounterSpec("retries_exceeded_per_s", "req_transport_retries_exceeded", "hw_counters", 32),
)

LINK_LAYERS = ("InfiniBand", "Ethernet")


@dataclass(frozen=True, slots=True)
class PortSample:
    """One port's reading; a field is None when its file is absent or reads N/A."""

    device: str
    port: int
    state: str | None
    rate_gbps: float | None
    link_layer: str | None
    counters: Mapping[str, int]
    """Counter file name -> value, for the files of `COUNTERS` that exist and hold a number."""


def parse_counter(text: str) -> int | None:
    """A counter file's value; None for `N/A (no PMA)` or anything else that is not a number."""
    s = text.strip()
    return int(s) if s.isdigit() else None


def parse_state(text: str) -> str | None:
    """`4: ACTIVE` -> `ACTIVE`."""
    s = text.strip()
    return s.split(":", 1)[1].strip() if ":" in s else (s or None)


_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")


def parse_rate(text: str) -> float | None:
    """`400 Gb/sec (4X NDR)` -> 400.0; None when unparseable."""
    m = _RATE.match(text)
    return float(m.group(1)) if m else None


_PFC = re.compile(r"^\s*rx_prio(\d+)_pause(_duration)?:\s*(\d+)\s*$", re.M)


def parse_ethtool_pfc(text: str) -> dict[str, dict[int, int]]:
    """From `ethtool -S` output, per-priority received PFC pauses:
    {"pause": {prio: n}, "duration": {prio: µs}}."""
    out: dict[str, dict[int, int]] = {"pause": {}, "duration": {}}
    for prio, dur, value in _PFC.findall(text):
        out["duration" if dur else "pause"][int(prio)] = int(value)
    return out


def parse_port(port_dir: Path, device: str, skipped: list[str]) -> PortSample:
    """Read one `ports/<n>/` directory; unreadable files are noted in `skipped` and left out."""
    base = f"{port_dir}/"

    def text(name: str) -> str | None:
        return read_optional(base + name, skipped)

    counters: dict[str, int] = {}
    for spec in COUNTERS:
        raw = text(f"{spec.directory}/{spec.file}")
        value = parse_counter(raw) if raw is not None else None
        if value is not None:
            counters[spec.file] = value
    state, rate, layer = text("state"), text("rate"), text("link_layer")
    return PortSample(
        device=device,
        port=int(port_dir.name),
        state=parse_state(state) if state is not None else None,
        rate_gbps=parse_rate(rate) if rate is not None else None,
        link_layer=layer.strip() if layer is not None else None,
        counters=counters,
    )


def run_ethtool(argv: Sequence[str]) -> str:
    """Default command runner: the command's stdout, with a short timeout so a hung driver cannot
    stall the tick."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=2.0, check=True).stdout


class RdmaCollector:
    """Rows of kind "nic", one per RDMA port.

    `sysfs_root`: where sysfs is mounted (fixture trees in tests). `pfc_netdevs`: RDMA device -> its
    netdev (e.g. {"mlx5_1": "ens1f1np1"}) for RoCE ports whose PFC counters `ethtool -S` should read;
    empty means no command is ever run. `run_command`: argv -> stdout, raising on failure.
    """

    name = "rdma"
    kind = "nic"

    def __init__(
        self,
        sysfs_root: str | Path = "/sys",
        *,
        pfc_netdevs: Mapping[str, str] | None = None,
        run_command: Callable[[Sequence[str]], str] = run_ethtool,
    ) -> None:
        self.base = Path(sysfs_root) / "class" / "infiniband"
        self.pfc_netdevs = dict(pfc_netdevs or {})
        self.run_command = run_command
        self.counters = Counters()
        self.skipped: list[str] = []
        """Files and commands that could not be read on the last tick (for the agent's log)."""

    def read(self) -> list[PortSample]:
        """Parse every port of every device (the pure half; `collect` turns samples into rows)."""
        if not self.base.is_dir():
            raise CollectorUnavailable(f"{self.base} does not exist: no RDMA devices on this node")
        try:
            devices = sorted(self.base.iterdir())
        except OSError as e:
            raise CollectorError(f"cannot list {self.base}: {e.strerror or e}") from e
        samples: list[PortSample] = []
        for dev in devices:
            ports_dir = dev / "ports"
            try:
                ports = sorted(
                    (p for p in ports_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
                )
            except OSError as e:
                self.skipped.append(f"{ports_dir}: {e.strerror or e}")
                continue
            samples.extend(parse_port(p, dev.name, self.skipped) for p in ports)
        return samples

    def collect(self, now_ms: int) -> list[Row]:
        self.skipped = []
        rows = []
        for s in self.read():
            source = f"{s.device}/{s.port}"
            row: Row = {"ts_ms": now_ms, "device": s.device, "port": s.port}
            if s.link_layer in LINK_LAYERS:
                row["link_layer"] = s.link_layer
            if s.state is not None:
                row["state"] = s.state
            if s.rate_gbps is not None:
                row["rate_gbps"] = s.rate_gbps
            for spec in COUNTERS:
                value = s.counters.get(spec.file)
                if value is None:
                    continue
                r = self.counters.rate(
                    source,
                    spec.file,
                    value,
                    now_ms,
                    width=spec.width,
                    saturating=spec.saturating,
                    scale=spec.scale,
                )
                if r is not None:
                    row[spec.field] = r
            if s.link_layer == "Ethernet" and s.device in self.pfc_netdevs:
                row.update(self._pfc(source, self.pfc_netdevs[s.device], now_ms))
            rows.append(row)
        return rows

    def _pfc(self, source: str, netdev: str, now_ms: int) -> Row:
        argv = ("ethtool", "-S", netdev)
        try:
            pfc = parse_ethtool_pfc(self.run_command(argv))
        except Exception as e:  # a failed command costs this port its PFC fields, never the tick
            self.skipped.append(f"{' '.join(argv)}: {e}")
            return {}
        out: Row = {}
        for field, key in (("pfc_pause_rx_per_s", "pause"), ("pfc_pause_us_per_s", "duration")):
            rate = sum_rates(
                [
                    self.counters.rate(source, f"pfc_{key}_{prio}", v, now_ms)
                    for prio, v in sorted(pfc[key].items())
                ]
            )
            if rate is not None:
                out[field] = rate
        return out
