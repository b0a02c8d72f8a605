"""Writes sysfs/procfs/Lustre fixture trees shaped like the kernel's, for two collection ticks.

`write_node(root, tick)` lays down everything the file collectors read, with tick-1 values chosen to
exercise each rule: a 32-bit counter that wraps (port_xmit_wait, out_of_sequence), a 16-bit error
counter pinned at its maximum (symbol_error), one reaching it (port_rcv_errors), a counter file that
reads `N/A (no PMA)` (port_xmit_discards), an unreadable counter (a directory where a file should
be), diskstats in the 11-, 15- and 17-field variants plus partitions, loop and ram devices to skip,
an NFS mount among other mounts, PSI, and Lustre llite and osc stats. The layout follows the kernel:
class/infiniband/<dev> is a symlink into devices/, ports/<n>/{counters,hw_counters}/ hold one value
per file, each ending in a newline.
"""

from __future__ import annotations

import os
from pathlib import Path

UNREADABLE = "packet_seq_err"  # on mlx5_1: a directory where the counter file should be
IB_PCI = "devices/pci0000:00/0000:00:02.0/0000:18:00.0"
ROCE_PCI = "devices/pci0000:00/0000:00:03.0/0000:29:00.1"

# (device, port) -> tick -> counter file -> value (str, as the kernel writes it)
IB_COUNTERS = {
    0: {
        "port_xmit_data": "1000000000",
        "port_rcv_data": "2000000000",
        "port_xmit_packets": "5000000",
        "port_rcv_packets": "6000000",
        "port_xmit_wait": "4294967000",
        "symbol_error": "65535",
        "port_rcv_errors": "65530",
        "port_xmit_discards": "N/A (no PMA)",
        "link_downed": "1",
    },
    1: {
        "port_xmit_data": "1250000000",
        "port_rcv_data": "2500000000",
        "port_xmit_packets": "5100000",
        "port_rcv_packets": "6200000",
        "port_xmit_wait": "704",
        "symbol_error": "65535",
        "port_rcv_errors": "65535",
        "port_xmit_discards": "N/A (no PMA)",
        "link_downed": "1",
    },
}
IB_HW = {
    0: {
        "out_of_sequence": "4294967290",
        "packet_seq_err": "7",
        "local_ack_timeout_err": "3",
        "req_transport_retries_exceeded": "0",
        "duplicate_request": "0",
        "rnr_nak_retry_err": "0",
    },
    1: {
        "out_of_sequence": "10",
        "packet_seq_err": "9",
        "local_ack_timeout_err": "3",
        "req_transport_retries_exceeded": "1",
        "duplicate_request": "0",
        "rnr_nak_retry_err": "0",
    },
}
ROCE_COUNTERS = {
    0: {
        "port_xmit_data": "500000000",
        "port_rcv_data": "400000000",
        "port_xmit_packets": "1000",
        "port_rcv_packets": "2000",
        "port_xmit_wait": "0",
        "symbol_error": "0",
        "port_rcv_errors": "0",
        "port_xmit_discards": "0",
        "link_downed": "0",
    },
    1: {
        "port_xmit_data": "750000000",
        "port_rcv_data": "400000000",
        "port_xmit_packets": "2000",
        "port_rcv_packets": "2000",
        "port_xmit_wait": "100",
        "symbol_error": "0",
        "port_rcv_errors": "0",
        "port_xmit_discards": "2",
        "link_downed": "0",
    },
}
ROCE_HW = {
    0: {
        "np_ecn_marked_roce_packets": "100",
        "np_cnp_sent": "90",
        "rp_cnp_handled": "80",
        "rp_cnp_ignored": "0",
        "out_of_sequence": "0",
        "packet_seq_err": "0",
        "local_ack_timeout_err": "0",
        "req_transport_retries_exceeded": "0",
    },
    1: {
        "np_ecn_marked_roce_packets": "600",
        "np_cnp_sent": "590",
        "rp_cnp_handled": "380",
        "rp_cnp_ignored": "0",
        "out_of_sequence": "0",
        "packet_seq_err": "0",
        "local_ack_timeout_err": "0",
        "req_transport_retries_exceeded": "0",
    },
}

# `ethtool -S ens1f1np1` as an mlx5 RoCE netdev prints it (trimmed), per tick
ETHTOOL = {
    tick: "NIC statistics:\n     rx_packets: 123456\n     tx_packets: 654321\n     rx_pause_ctrl_phy: 0\n"
    + "".join(
        f"     rx_prio{p}_bytes: 0\n     rx_prio{p}_packets: 0\n     rx_prio{p}_pause: {pause}\n"
        f"     rx_prio{p}_pause_duration: {dur}\n     tx_prio{p}_pause: 0\n"
        f"     tx_prio{p}_pause_duration: 0\n"
        f"     rx_prio{p}_pause_transition: 0\n"
        for p, (pause, dur) in enumerate(prios)
    )
    + "     module_unplug: 0\n"
    for tick, prios in {
        0: [(0, 0)] * 3 + [(1000, 50000)] + [(0, 0)] * 4,
        1: [(0, 0)] * 3 + [(1500, 80000)] + [(10, 200)] + [(0, 0)] * 3,
    }.items()
}

DISKSTATS = {
    0: """\
   8       0 sda 1000 10 80000 500 2000 20 160000 1500 0 800 2000
   8       1 sda1 900 10 70000 450 1900 20 150000 1400 0 700 1800
 259       0 nvme0n1 5000 0 400000 4294966000 8000 0 640000 9000 2 3000 12000 10 0 800 5
 259       1 nvme0n1p1 4000 0 300000 1000 7000 0 600000 8000 0 2000 9000 0 0 0 0
 254       0 vda 28923 5813 2399146 9827 6707 19080 2886912 7141 0 5500 17299 3270 48 143344 317 294 12
   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
   1       0 ram0 0 0 0 0 0 0 0 0 0 0 0
 253       0 zram0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
""",
    1: """\
   8       0 sda 1100 10 88000 600 2050 20 164000 1600 1 1300 2200
   8       1 sda1 950 10 74000 500 1950 20 154000 1450 0 750 1900
 259       0 nvme0n1 5200 0 425600 704 8100 0 680000 9100 0 3500 12500 10 0 800 5
 259       1 nvme0n1p1 4100 0 310000 1100 7100 0 610000 8100 0 2100 9100 0 0 0 0
 254       0 vda 28923 5813 2399146 9827 6807 19080 2896912 7241 0 5600 17399 3270 48 143344 318 300 13
   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
   1       0 ram0 0 0 0 0 0 0 0 0 0 0 0
 253       0 zram0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
""",
}

PSI = {
    0: "some avg10=1.29 avg60=0.30 avg300=0.21 total=3194952\n"
    "full avg10=1.14 avg60=0.27 avg300=0.20 total=3043037\n",
    1: "some avg10=9.00 avg60=2.00 avg300=0.50 total=3444952\n"
    "full avg10=4.00 avg60=1.00 avg300=0.30 total=3143037\n",
}

_NFS_HEAD = """\
device rootfs mounted on / with fstype rootfs
device proc mounted on /proc with fstype proc
device /dev/vda1 mounted on /boot with fstype ext4
device 10.0.0.5:/export/datasets mounted on /mnt/datasets with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,acregmin=3,acregmax=60,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.21,local_lock=none
\tage:\t86400
\timpl_id:\tname='',domain='',date='0,0'
\tcaps:\tcaps=0x3ffbffff,wtmult=512,dtsize=32768,bsize=0,namlen=255
\tsec:\tflavor=1,pseudoflavor=1
\tevents:\t52 244 0 11 30 31 319 0 0 2048 0 0 0 0 9 0 0 0 0 0 0 0 0 0 0 0 0
"""
_NFS_OPS = """\
\tRPC iostats version: 1.1  p/v: 100003/4 (nfs)
\txprt:\ttcp 0 0 2 0 39 1184 1184 0 1184 0 2 0 0
\tper-op statistics
\t        NULL: 1 1 0 44 24 0 0 0 0
\t        READ: {reads} {reads} 0 {rsent} {rrecv} 12 {rtt} {exe} 0
\t       WRITE: {writes} {writes} 0 543232 20480 5 1024 1060 0
\t      COMMIT: 4 4 0 704 576 0 3 3 0

device 10.0.0.6:/home mounted on /home/shared\\040dir with fstype nfs statvers=1.1
\topts:\trw,vers=3
\tbytes:\t0 0 0 0 0 0 0 0
\tper-op statistics
\t        READ: 0 0 0 0 0 0 0 0
"""
MOUNTSTATS = {
    tick: _NFS_HEAD
    + f"\tbytes:\t{nr} {nw} 0 0 {sr} {sw} {sr // 4096} {sw // 4096}\n"
    + _NFS_OPS.format(
        reads=reads, rsent=reads * 144, rrecv=sr + reads * 100, rtt=rtt, exe=rtt + 50, writes=writes
    )
    for tick, (nr, nw, sr, sw, reads, rtt, writes) in {
        0: (10 << 20, 5 << 20, 8 << 20, 5 << 20, 256, 2048, 128),
        1: (30 << 20, 6 << 20, 108 << 20, 6 << 20, 356, 2548, 160),
    }.items()
}

_LUSTRE_HEAD = (
    "snapshot_time             {t}.000000000 secs.nsecs\n"
    "start_time                1700000000.000000000 secs.nsecs\n"
    "elapsed_time              {t}.000000000 secs.nsecs\n"
)
LLITE = {
    tick: _LUSTRE_HEAD.format(t=1700000100 + tick)
    + f"read_bytes                {rc} samples [bytes] 4096 1048576 {rb} 1099511627776\n"
    + f"write_bytes               {wc} samples [bytes] 4096 1048576 {wb} 1099511627776\n"
    + f"read                      {rc} samples [usec] 10 5000 {rus} 123456789\n"
    + "open                      12 samples [usec] 1 10 30 120\n"
    + "close                     12 samples [usec] 1 10 30 120\n"
    + "getattr                   200 samples [usec] 1 10 300 1200\n"
    for tick, (rc, rb, wc, wb, rus) in {
        0: (1000, 500 << 20, 200, 100 << 20, 200000),
        1: (1400, 900 << 20, 210, 110 << 20, 240000),
    }.items()
}
OSC = {
    tick: _LUSTRE_HEAD.format(t=1700000100 + tick)
    + "req_waittime              5000 samples [usec] 30 90000 2500000 9000000000\n"
    + "req_active                5000 samples [reqs] 1 8 9000 30000\n"
    + f"read_bytes                {rc} samples [bytes] 4096 4194304 {rb} 1099511627776\n"
    + f"write_bytes               {wc} samples [bytes] 4096 4194304 {wb} 1099511627776\n"
    + f"ost_read                  {rc} samples [usec] 100 90000 {rus} 9000000000\n"
    + "ost_write                 50 samples [usec] 100 90000 50000 9000000000\n"
    for tick, (rc, rb, wc, wb, rus) in {
        0: (100, 400 << 20, 50, 100 << 20, 300000),
        1: (200, 800 << 20, 50, 100 << 20, 800000),
    }.items()
}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")


def _ib_port(
    sys_root: Path,
    pci: str,
    dev: str,
    port: int,
    *,
    layer: str,
    state: str,
    rate: str,
    counters: dict[str, str],
    hw: dict[str, str],
) -> None:
    devdir = sys_root / pci / "infiniband" / dev
    link = sys_root / "class" / "infiniband" / dev
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(devdir, link.parent), link)
    pdir = devdir / "ports" / str(port)
    _write(devdir / "node_type", "1: CA")
    _write(pdir / "state", state)
    _write(pdir / "phys_state", "5: LinkUp")
    _write(pdir / "rate", rate)
    _write(pdir / "link_layer", layer)
    for name, value in counters.items():
        _write(pdir / "counters" / name, value)
    for name, value in hw.items():
        _write(pdir / "hw_counters" / name, value)


def write_sysfs(sys_root: Path, tick: int) -> None:
    _ib_port(
        sys_root,
        IB_PCI,
        "mlx5_0",
        1,
        layer="InfiniBand",
        state="4: ACTIVE",
        rate="400 Gb/sec (4X NDR)",
        counters=IB_COUNTERS[tick],
        hw=IB_HW[tick],
    )
    hw = {k: v for k, v in ROCE_HW[tick].items() if k != UNREADABLE}
    _ib_port(
        sys_root,
        ROCE_PCI,
        "mlx5_1",
        1,
        layer="Ethernet",
        state="4: ACTIVE",
        rate="200 Gb/sec (4X HDR)",
        counters=ROCE_COUNTERS[tick],
        hw=hw,
    )
    # An unreadable counter: reading it fails with an OSError other than "not found".
    (sys_root / ROCE_PCI / "infiniband/mlx5_1/ports/1/hw_counters" / UNREADABLE).mkdir(exist_ok=True)


def write_proc(proc_root: Path, tick: int) -> None:
    _write(proc_root / "diskstats", DISKSTATS[tick])
    _write(proc_root / "pressure" / "io", PSI[tick])
    _write(proc_root / "self" / "mountstats", MOUNTSTATS[tick])


def write_lustre(lustre_root: Path, tick: int) -> None:
    _write(lustre_root / "llite" / "scratch-ffff8881a2b3c000" / "stats", LLITE[tick])
    _write(lustre_root / "osc" / "scratch-OST0000-osc-ffff8881a2b3c000" / "stats", OSC[tick])
    _write(lustre_root / "osc" / "scratch-OST0001-osc-ffff8881a2b3c000" / "stats", OSC[tick])


def write_node(root: Path, tick: int) -> None:
    """Everything at once: <root>/sys, <root>/proc, <root>/proc/fs/lustre."""
    write_sysfs(root / "sys", tick)
    write_proc(root / "proc", tick)
    write_lustre(root / "proc" / "fs" / "lustre", tick)


TYPICAL_DISKS = "".join(
    f" 259 {i} nvme{i}n1 5000 0 400000 3000 8000 0 640000 9000 2 3000 12000 10 0 800 5 31 7\n"
    f" 259 {i + 10} nvme{i}n1p1 4000 0 300000 1000 7000 0 600000 8000 0 2000 9000 0 0 0 0 0 0\n"
    for i in range(4)
)


def write_typical_node(root: Path, *, ports: int = 8, osts: int = 8) -> None:
    """A typical 8-GPU training node's files: `ports` RDMA ports (the last two RoCE), 4 NVMe disks
    with partitions, PSI, one NFS mount, and a Lustre client (`<root>/lustre`) with `osts` OSTs."""
    sysfs, proc, lustre = root / "sys", root / "proc", root / "lustre"
    for i in range(ports):
        layer = "InfiniBand" if i < ports - 2 else "Ethernet"
        _ib_port(
            sysfs,
            f"devices/pci0000:00/0000:00:{i:02x}.0",
            f"mlx5_{i}",
            1,
            layer=layer,
            state="4: ACTIVE",
            rate="400 Gb/sec (4X NDR)",
            counters=ROCE_COUNTERS[0],
            hw=ROCE_HW[0] | IB_HW[0],
        )
    _write(proc / "diskstats", TYPICAL_DISKS)
    _write(proc / "pressure" / "io", PSI[0])
    _write(proc / "self" / "mountstats", MOUNTSTATS[0])
    _write(lustre / "llite" / "scratch-ffff8881a2b3c000" / "stats", LLITE[0])
    for ost in range(osts):
        _write(lustre / "osc" / f"scratch-OST{ost:04x}-osc-ffff8881a2b3c000" / "stats", OSC[0])


def typical_gpus(n: int = 8):
    """n busy H100s for the fake NVML, with GPM, 18 NVLinks and their error counters."""
    from tests.collectors.fake_pynvml import FakeGpu

    gpus = [FakeGpu(i, pids=[], gpm={2: 60.0, 3: 40.0, 5: 30.0, 10: 70.0}) for i in range(n)]
    for g in gpus:
        g.nvlink_kib = {(fid, link): 1000 for link in range(g.nvlinks) for fid in (138, 139)}
        g.nvlink_errors = {38: 0, 45: 0, 52: 0, 59: 0}
    return gpus
