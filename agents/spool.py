"""The agent's bounded on-disk queue for batches Kafka did not take (unreachable, slow, refusing).

Layout (format version 1, documented in docs/kafka.md): a directory of append-only segment files
`<20-digit id>.seg`, ids growing; each starts with the 8-byte header b"GPSPL" + version (u8) + 2 zero
bytes, then records:

    u32 length | u32 crc32 | body            (little-endian; length = len(body))
    body = u16 topic_len | topic (UTF-8) | i32 key_len (-1: no key) | key | value

The CRC covers the length field and the body, so a torn write (the process killed mid-record, the
machine losing power) shows up either as a record running past the end of the file or as a CRC
mismatch. On open the spool truncates the segment there, counts it in `stats.torn` and carries on:
everything before the torn record is kept, nothing after it existed.

Delivery: `replay()` yields what is not yet acknowledged, oldest first; the caller sends it and calls
`ack(entry)`, which acknowledges that entry and everything before it, or `ack_topic(entry)`, which
acknowledges that entry and everything before it *in the same topic*. The second exists because the
topics are independent streams: one stuck topic (or a large window still in flight) must not hold
back the record of what the others delivered, or a crash would send those again. Fully acknowledged
segments are deleted; the position inside a partly acknowledged one, and each topic's position past
it, are kept in `ack`, rewritten in place at every acknowledgement (one pwrite, no rename, no fsync:
it must be cheap enough to run on every delivery), so a restart replays exactly what was not
acknowledged. What a crash can still send twice is a batch that Kafka appended but whose
acknowledgement the agent never received; the loader's duplicate detection (envelope `seq`) stores it
once.

Bounded: when an append would take the directory past `max_bytes`, the oldest segments are deleted
(newest data is the most useful to a goodput dashboard catching up after an outage) and their unsent
batches are counted in `stats.dropped`. A disk that fills up first refuses batches (see `append`), and
space only comes back a whole segment at a time, when every batch in it is delivered: so a segment is
opened to grow to at most an eighth of the room the spool has on its disk at that moment (what it
holds plus the free space of its filesystem), never to `segment_bytes` on a disk that holds less.
Why: a 4 MiB segment on a disk with 192 KiB free was the whole disk, and after an outage the spool
went on refusing every new batch until the very last batch of that segment was delivered; with
eighths, the delivered ones free their segments while the last few are still in flight.

Durability is a policy: fsync after every record (`"always"`), after every N records (an int), or
never (the OS writes back; a power loss may cost the last seconds, a process kill costs nothing).

Not safe across processes (one agent owns one directory); safe across threads.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import pathlib
import struct
import threading
import zlib
from dataclasses import dataclass
from typing import Iterator

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MAGIC = b"GPSPL"
HEADER = MAGIC + bytes([FORMAT_VERSION, 0, 0])
_PREFIX = struct.Struct("<II")  # length, crc32
_SUFFIX = ".seg"
_ACK_FILE = "ack"
_ACK_SIZE = 4096
"""The ack file is a multiple of this long (JSON padded with spaces): rewritten in place, never shorter."""
_MIN_SEGMENT = 16 * 1024
"""The smallest segment a nearly full disk makes `_segment_limit` choose (fewer, tinier files)."""


@dataclass(frozen=True, slots=True)
class SpoolEntry:
    """One spooled batch. `segment`/`end` locate it; pass the entry back to `Spool.ack`."""

    topic: str
    key: bytes | None
    value: bytes
    segment: int
    index: int
    end: int


@dataclass(frozen=True, slots=True)
class SpoolStats:
    bytes: int
    """Bytes the segment files take on disk (what `max_bytes` bounds)."""
    batches: int
    """Batches stored and not yet acknowledged."""
    dropped: int
    """Unacknowledged batches deleted because the spool was full (since this Spool was opened)."""
    torn: int
    """Torn or corrupt records found and truncated (since this Spool was opened)."""
    segments: int


class _Segment:
    """What the spool knows about one file: record end offsets and how many are acknowledged."""

    __slots__ = ("id", "path", "ends", "topics", "acked", "size")

    def __init__(self, seg_id: int, path: pathlib.Path):
        self.id = seg_id
        self.path = path
        self.ends: list[int] = []
        self.topics: list[str] = []  # the topic of each record, for per-topic acknowledgement
        self.acked = 0
        self.size = len(HEADER)

    @property
    def live(self) -> int:
        return len(self.ends) - self.acked

    def start_of(self, index: int) -> int:
        return self.ends[index - 1] if index else len(HEADER)


def encode_record(topic: str, key: bytes | None, value: bytes) -> bytes:
    t = topic.encode()
    if len(t) > 0xFFFF:
        raise ValueError(f"topic name too long for the spool ({len(t)} bytes)")
    body = b"".join(
        [
            struct.pack("<H", len(t)),
            t,
            struct.pack("<i", -1 if key is None else len(key)),
            key or b"",
            value,
        ]
    )
    length = struct.pack("<I", len(body))
    return length + struct.pack("<I", zlib.crc32(body, zlib.crc32(length))) + body


def decode_body(body: bytes) -> tuple[str, bytes | None, bytes]:
    (tlen,) = struct.unpack_from("<H", body, 0)
    topic = body[2 : 2 + tlen].decode()
    (klen,) = struct.unpack_from("<i", body, 2 + tlen)
    pos = 6 + tlen
    if klen < 0:
        return topic, None, body[pos:]
    return topic, body[pos : pos + klen], body[pos + klen :]


def _scan(data: bytes) -> tuple[list[int], list[str], bool]:
    """Record end offsets and topics of a segment's bytes, and whether it ends in a torn or corrupt
    record."""
    ends: list[int] = []
    topics: list[str] = []
    pos = len(HEADER)
    n = len(data)
    while pos < n:
        if n - pos < _PREFIX.size:
            return ends, topics, True
        length, crc = _PREFIX.unpack_from(data, pos)
        end = pos + _PREFIX.size + length
        if end > n or length < 6:
            return ends, topics, True
        body = data[pos + _PREFIX.size : end]
        if zlib.crc32(body, zlib.crc32(data[pos : pos + 4])) != crc:
            return ends, topics, True
        ends.append(end)
        topics.append(decode_body(body)[0])
        pos = end
    return ends, topics, False


class Spool:
    """A bounded, crash-safe FIFO of (topic, key, value) batches in `directory`."""

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        max_bytes: int = 256 * 1024 * 1024,
        segment_bytes: int | None = None,
        fsync: str | int = 100,
    ):
        if fsync not in ("always", "never") and not (isinstance(fsync, int) and fsync >= 1):
            raise ValueError(f"spool fsync={fsync!r}: 'always', 'never' or a record count >= 1")
        self.dir = pathlib.Path(directory)
        self.max_bytes = int(max_bytes)
        self.segment_bytes = int(segment_bytes or max(64 * 1024, min(self.max_bytes // 8, 64 * 1024 * 1024)))
        if self.segment_bytes > self.max_bytes:
            raise ValueError(f"spool segment_bytes={self.segment_bytes} exceeds max_bytes={self.max_bytes}")
        self.fsync = fsync
        self._lock = threading.RLock()
        self._segments: list[_Segment] = []
        self._fd: int | None = None
        self._limit = self.segment_bytes  # how large the segment being written may grow
        self._unsynced = 0
        self._dropped = 0
        self._torn = 0
        self._next_id = 1
        # topic -> (segment id, index): that batch and every earlier one of its topic are delivered.
        # Only positions past the global acknowledgement are kept.
        self._ahead: dict[str, tuple[int, int]] = {}
        self._ack_fd: int | None = None
        self._ack_size = _ACK_SIZE
        self._full = 0  # batches refused since the disk became full (0: it is not)
        self._freed = False  # a segment deleted since the last refusal: room really came back
        self.dir.mkdir(parents=True, exist_ok=True)
        self._recover()

    # ---------------------------------------------------------------- opening

    def _recover(self) -> None:
        # Ids only grow, even past deleted and set-aside segments: the ack file names a segment id,
        # and a new segment reusing an old id would count as already acknowledged.
        ids = [int(p.name[:20]) for p in self.dir.iterdir() if p.name[:20].isdigit()]
        self._next_id = max(ids, default=0) + 1
        paths = sorted(p for p in self.dir.glob("*" + _SUFFIX) if p.stem.isdigit())
        for path in paths:
            data = path.read_bytes()
            if len(data) < len(HEADER) or data[: len(MAGIC)] != MAGIC:
                # A file whose header never got written completely: created, then killed.
                log.warning("spool: removing %s: no complete segment header (%d bytes)", path, len(data))
                self._torn += 1 if data else 0
                path.unlink()
                continue
            if data[len(MAGIC)] != FORMAT_VERSION:
                aside = path.with_name(path.name + f".v{data[len(MAGIC)]}.unreadable")
                log.warning(
                    "spool: %s has format version %d, this agent reads %d; moved aside to %s",
                    path,
                    data[len(MAGIC)],
                    FORMAT_VERSION,
                    aside,
                )
                path.rename(aside)
                continue
            seg = _Segment(int(path.stem), path)
            seg.ends, seg.topics, torn = _scan(data)
            seg.size = seg.ends[-1] if seg.ends else len(HEADER)
            if torn:
                log.warning(
                    "spool: %s: torn or corrupt record at byte %d of %d; truncated there",
                    path,
                    seg.size,
                    len(data),
                )
                self._torn += 1
                with path.open("r+b") as f:
                    f.truncate(seg.size)
                    os.fsync(f.fileno())
            self._segments.append(seg)
        self._load_ack()
        self._delete_finished()

    def _load_ack(self) -> None:
        path = self.dir / _ACK_FILE
        try:
            ack = json.loads(path.read_text())
            seg_id, end = int(ack["segment"]), int(ack["end"])
            ahead = {str(t): (int(s), int(e)) for t, (s, e) in ack.get("topics", {}).items()}
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError):
            log.warning(
                "spool: unreadable %s; replaying from the oldest segment (duplicates are harmless)", path
            )
            return
        self._next_id = max(self._next_id, seg_id + 1)
        for seg in self._segments:
            if seg.id < seg_id:
                seg.acked = len(seg.ends)
            elif seg.id == seg_id:
                seg.acked = sum(1 for e in seg.ends if e <= end)
        by_id = {seg.id: seg for seg in self._segments}
        for topic, (s, e) in ahead.items():
            held = by_id.get(s)
            index = sum(1 for x in held.ends if x <= e) - 1 if held else -1
            if index >= 0:
                self._ahead[topic] = (s, index)
        self._advance()

    # ---------------------------------------------------------------- writing

    def append(self, topic: str, key: bytes | None, value: bytes) -> bool:
        """Stores one batch, deleting the oldest segments first if it would not fit in `max_bytes`.

        Returns False when the disk is full (ENOSPC, or EDQUOT over a quota) before `max_bytes` is
        reached: the batch is not stored and is counted in `stats.dropped`, any part of it that was
        written is cut off again (so the segment stays readable), and the spool carries on; the
        sender deleting delivered segments makes room. Why not raise: a full disk must not stop the
        agent, and a crash loop would lose more than the batches the disk cannot hold. The first
        refusal is logged, and the first success after a segment was deleted (room that came back),
        with the count in between; a small batch stored in what a refused one had taken is not."""
        rec = encode_record(topic, key, value)
        if len(HEADER) + len(rec) > self.max_bytes:
            raise ValueError(
                f"batch of {len(rec)} bytes is larger than the whole spool (max_bytes={self.max_bytes})"
            )
        with self._lock:
            try:
                seg = self._active()
                if seg.size + len(rec) > self._limit and seg.ends:
                    seg = self._rotate()
                while self._bytes() + len(rec) > self.max_bytes:
                    if self._segments[0] is seg:
                        seg = self._rotate()
                    self._drop_oldest()
                self._write(seg, rec, topic)
            except OSError as e:
                if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                self._refused(e)
                return False
            if self._full and self._freed:
                log.info(
                    "spool: %s has room again; %d batches were dropped while it was full",
                    self.dir,
                    self._full,
                )
                self._full = 0
            return True

    def _refused(self, e: OSError) -> None:
        """An append that the disk refused: cut what it wrote, count the batch as dropped."""
        if self._fd is not None and self._segments:
            os.ftruncate(self._fd, self._segments[-1].size)
        # Space comes back a segment at a time, and the segment being written is never deleted while
        # it is open: close it, so that once the sender has delivered it, it goes too. The next append
        # recomputes the segment's limit for the full disk (`_active`): a segment opened on a disk
        # with more room is not written further, a new, small one is started.
        # "Room again" waits for a segment to go: the pages the refused batch had taken are free now, and
        # a smaller batch (another kind's) may fit in them, only for the next large one to be refused:
        # that is still a full disk, not one to announce as recovered and then as full again.
        self._freed = False
        self._close_fd()
        self._delete_finished()
        self._dropped += 1
        if not self._full:
            log.warning(
                "spool: %s is full (%s): new batches are dropped and counted until there is room "
                "(goodput_agent_spool_dropped_batches_total); free space on it, or lower "
                "[agent].spool_max_bytes below what it can hold",
                self.dir,
                e.strerror,
            )
        self._full += 1

    def _active(self) -> _Segment:
        if self._segments and self._fd is not None:
            return self._segments[-1]
        self._limit = self._segment_limit()
        if self._segments and self._segments[-1].size < self._limit:
            seg = self._segments[-1]
            self._fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND)
            return seg
        return self._rotate()

    def _rotate(self) -> _Segment:
        """Closes the active segment and starts a new one."""
        self._close_fd()
        self._limit = self._segment_limit()
        seg_id, self._next_id = self._next_id, self._next_id + 1
        seg = _Segment(seg_id, self.dir / f"{seg_id:020d}{_SUFFIX}")
        self._fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(self._fd, HEADER)
            if self.fsync != "never":
                os.fsync(self._fd)
                self._fsync_dir()
        except OSError:  # the disk is full: no half-made segment is left behind
            os.close(self._fd)
            self._fd = None
            seg.path.unlink(missing_ok=True)
            raise
        self._segments.append(seg)
        return seg

    def _segment_limit(self) -> int:
        """How large the segment opened now may grow: `segment_bytes`, but at most an eighth of the room
        the spool has on its disk (module docstring, "Bounded"), and at least _MIN_SEGMENT."""
        disk = os.statvfs(self.dir)
        room = self._bytes() + disk.f_bavail * disk.f_frsize
        return min(self.segment_bytes, max(_MIN_SEGMENT, room // 8))

    def _write(self, seg: _Segment, rec: bytes, topic: str) -> None:
        assert self._fd is not None  # _active/_rotate opened the active segment
        _write_all(self._fd, rec)
        seg.size += len(rec)
        seg.ends.append(seg.size)
        seg.topics.append(topic)
        self._unsynced += 1
        if self.fsync == "always" or (isinstance(self.fsync, int) and self._unsynced >= self.fsync):
            os.fsync(self._fd)
            self._unsynced = 0

    def _drop_oldest(self) -> None:
        seg = self._segments.pop(0)
        unsent = seg.live - sum(1 for i in range(seg.acked, len(seg.ends)) if self._covered(seg, i))
        if unsent:
            self._dropped += unsent
            log.warning(
                "spool full (max_bytes=%d): dropped %d unsent batches of segment %s",
                self.max_bytes,
                unsent,
                seg.path.name,
            )
        seg.path.unlink(missing_ok=True)
        self._freed = True

    def sync(self) -> None:
        """Forces what was appended to disk now, whatever the fsync policy."""
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)
                self._unsynced = 0

    # ---------------------------------------------------------------- reading

    def replay(self) -> Iterator[SpoolEntry]:
        """Unacknowledged batches, oldest first, as stored when the call began. A segment dropped for
        space while the iteration runs is skipped; a record found corrupt on disk ends its segment."""
        with self._lock:
            plan = [(seg, seg.acked, len(seg.ends)) for seg in self._segments if seg.live]
            ahead = dict(self._ahead)  # batches acknowledged with their topic are skipped
        for seg, first, stop in plan:
            try:
                f = seg.path.open("rb")
            except FileNotFoundError:
                continue
            with f:
                f.seek(seg.start_of(first))
                for index in range(first, stop):
                    start, end = seg.start_of(index), seg.ends[index]
                    pos = ahead.get(seg.topics[index])
                    if pos is not None and (seg.id, index) <= pos:
                        f.seek(end)
                        continue
                    data = f.read(end - start)
                    length, crc = _PREFIX.unpack_from(data, 0) if len(data) >= 8 else (0, 0)
                    if len(data) != end - start or zlib.crc32(data[8:], zlib.crc32(data[:4])) != crc:
                        log.warning(
                            "spool: %s changed on disk at byte %d; skipping the rest of it", seg.path, start
                        )
                        with self._lock:
                            self._torn += 1
                        break
                    topic, key, value = decode_body(data[8:])
                    yield SpoolEntry(topic, key, value, seg.id, index, end)

    def last_position(self) -> tuple[int, int] | None:
        """(segment, index) of the newest unacknowledged batch, from memory (no file is read)."""
        with self._lock:
            for seg in reversed(self._segments):
                if seg.live:
                    return seg.id, len(seg.ends) - 1
        return None

    def ack(self, entry: SpoolEntry) -> None:
        """Acknowledges `entry` and every batch before it: they were delivered and are forgotten."""
        with self._lock:
            for seg in self._segments:
                if seg.id < entry.segment:
                    seg.acked = len(seg.ends)
                elif seg.id == entry.segment:
                    seg.acked = max(seg.acked, min(entry.index + 1, len(seg.ends)))
            self._advance()
            self._delete_finished()
            self._write_ack()

    def ack_topic(self, entry: SpoolEntry) -> None:
        """Acknowledges `entry` and every batch before it in the same topic (the caller knows they were
        all delivered), leaving other topics' batches waiting. Where that closes the gap before the
        oldest waiting batch, the whole prefix is acknowledged as by `ack`."""
        with self._lock:
            pos = (entry.segment, entry.index)
            if pos <= self._ahead.get(entry.topic, (-1, -1)) or pos < self._prefix_end():
                return
            self._ahead[entry.topic] = pos
            self._advance()
            self._delete_finished()
            self._write_ack()

    def _covered(self, seg: _Segment, index: int) -> bool:
        """Whether the record was acknowledged with its topic (`ack_topic`), past the prefix."""
        pos = self._ahead.get(seg.topics[index])
        return pos is not None and (seg.id, index) <= pos

    def _prefix_end(self) -> tuple[int, int]:
        """(segment, index) of the oldest batch not acknowledged by position."""
        for seg in self._segments:
            if seg.live:
                return seg.id, seg.acked
        return self._next_id, 0

    def _advance(self) -> None:
        """Moves the prefix over batches acknowledged with their topic, and forgets topic positions
        the prefix has reached."""
        for seg in self._segments:
            while seg.acked < len(seg.ends) and self._covered(seg, seg.acked):
                seg.acked += 1
            if seg.live:
                break
        first = self._prefix_end()
        self._ahead = {t: pos for t, pos in self._ahead.items() if pos >= first}

    def _delete_finished(self) -> None:
        """Deletes leading segments that are fully acknowledged, except the one being written."""
        while self._segments and self._segments[0].live == 0:
            seg = self._segments[0]
            if seg is self._segments[-1] and self._fd is not None:
                break
            self._segments.pop(0)
            seg.path.unlink(missing_ok=True)
            self._freed = True

    def _write_ack(self) -> None:
        """Rewrites the ack file in place: one pwrite of a fixed-size block (JSON padded with spaces,
        so no tail of a longer old version survives), never fsynced, whatever the policy. It runs on
        every delivery, so it must cost microseconds: a rename cost ~0.8 ms here, an fsync more than
        everything else the agent does. A process kill cannot tear a single pwrite (the page cache
        survives it); a power loss can, and an unreadable ack replays from the oldest segment, which
        the loader's dedup by seq absorbs."""
        last = None
        for seg in self._segments:
            if seg.acked:
                last = (seg.id, seg.ends[seg.acked - 1])
            if seg.live:
                break
        if last is None:  # nothing acknowledged is on disk: name the id just below the oldest segment
            last = ((self._segments[0].id if self._segments else self._next_id) - 1, len(HEADER))
        by_id = {seg.id: seg for seg in self._segments}
        body = json.dumps(
            {
                "version": FORMAT_VERSION,
                "segment": last[0],
                "end": last[1],
                "topics": {t: [s, by_id[s].ends[i]] for t, (s, i) in self._ahead.items() if s in by_id},
            }
        ).encode()
        self._ack_size = max(self._ack_size, -(-len(body) // _ACK_SIZE) * _ACK_SIZE)
        if self._ack_fd is None:
            self._ack_fd = os.open(self.dir / _ACK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        os.pwrite(self._ack_fd, body.ljust(self._ack_size), 0)

    # ---------------------------------------------------------------- state

    def _bytes(self) -> int:
        return sum(seg.size for seg in self._segments)

    @property
    def stats(self) -> SpoolStats:
        with self._lock:
            return SpoolStats(
                bytes=self._bytes(),
                batches=sum(s.live for s in self._segments) - self._ahead_count(),
                dropped=self._dropped,
                torn=self._torn,
                segments=len(self._segments),
            )

    def _ahead_count(self) -> int:
        """Batches past the prefix acknowledged with their topic (at most one send window of them)."""
        if not self._ahead:
            return 0
        last = max(self._ahead.values())
        n = 0
        for seg in self._segments:
            for i in range(seg.acked, len(seg.ends)):
                if (seg.id, i) > last:
                    return n
                n += self._covered(seg, i)
        return n

    def __len__(self) -> int:
        return self.stats.batches

    def _fsync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _close_fd(self) -> None:
        if self._fd is not None:
            if self.fsync != "never" and self._unsynced:
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            self._unsynced = 0

    def close(self) -> None:
        with self._lock:
            self._close_fd()
            if self._ack_fd is not None:
                os.close(self._ack_fd)
                self._ack_fd = None

    def __enter__(self) -> "Spool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
