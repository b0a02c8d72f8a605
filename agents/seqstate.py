"""Per-(node, kind) batch sequence numbers that survive agent restarts, crashes and power loss.

Why it matters: the loader identifies a batch by (cluster, node, kind, seq) and stores a repeated seq
once. An agent that reused a seq would have its new batch dropped as a duplicate of an old one —
silent loss. A gap costs nothing but a "gap" count in the loader. So the rule is: never reuse, and
leave a gap only when nothing better is possible.

Cheap and safe, without an fsync per batch:
- `seq.json` holds the exact next seq per kind, rewritten in place (one small pwrite, no rename:
  a rename per batch cost more than the collectors on an overlay filesystem) on every reservation,
  before the batch is written to the spool. A killed process (SIGKILL, OOM, a crash) leaves the page
  cache intact, so after a restart on the same boot the file is exact; one that does not parse (a
  torn write) is not trusted.
- `seq.ceiling.json` holds, per kind, a number the agent will not reach without first rewriting the
  ceiling, `block` above the exact value, and is fsynced. It is rewritten once per `block` batches.
- each write records the kernel's boot id; a clean stop marks the exact file `clean` and fsyncs it.
  At start-up, an exact file from this boot, or from a clean stop, is trusted. Otherwise the machine
  lost power or panicked after an unclean stop, the exact file may be stale, and the agent resumes at
  the ceiling: a gap of at most `block` seqs, never a reuse. The same happens when the exact file is
  unreadable but the ceiling is not.

As a second line of defence `floor()` raises the state to one past the highest seq still in the spool
(a state directory restored from an old image, say).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from contracts.schema import KINDS

log = logging.getLogger(__name__)
FORMAT_VERSION = 1
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_EXACT_SIZE = 1024
"""seq.json is always this long (padded with spaces), so rewriting it in place never leaves a tail."""


def current_boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""  # not Linux: every unclean stop is treated as a possible power loss


class AgentStateError(RuntimeError):
    """The state file cannot be trusted; the message says how to repair it."""


class SeqState:
    def __init__(
        self, path: str | os.PathLike, node: str, *, block: int = 100, boot_id: str | None = None
    ) -> None:
        self.path = Path(path)
        self.ceiling_path = self.path.with_name(self.path.stem + ".ceiling.json")
        self.node = node
        self.block = block
        self.boot_id = current_boot_id() if boot_id is None else boot_id
        self.next: dict[str, int] = {k: 0 for k in KINDS}
        self.ceiling: dict[str, int] = {k: 0 for k in KINDS}
        self._fd: int | None = None
        self._load()

    def _read(self, path: Path, *, fallback: bool = False) -> dict | None:
        """The file's content; None when it does not exist, or (with `fallback`) cannot be parsed."""
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            if fallback:
                log.warning("agent state %s is unreadable (%s); falling back to the durable ceiling", path, e)
                return None
            raise AgentStateError(
                f"agent state {path} is unreadable ({e}). Restore it from a backup, or write "
                f'{{"node": "{self.node}", "next": {{"<kind>": <n>}}}} to {self.path} with n above the '
                f"highest seq the loader stored for this node (SELECT kind, max(seq) FROM ingested_batches "
                f"WHERE node = '{self.node}' GROUP BY kind): restarting at 0 would make the loader drop "
                f"new batches as duplicates"
            ) from None
        if data.get("node") not in (None, self.node):
            raise AgentStateError(
                f"agent state {path} belongs to node {data.get('node')!r}, not {self.node!r}: each node "
                f"needs its own state_dir (a copied disk image or a shared volume?)"
            )
        return data

    @staticmethod
    def _counts(data: dict | None, key: str) -> dict[str, int]:
        values = (data or {}).get(key, {})
        return {k: n for k, n in values.items() if k in KINDS and isinstance(n, int) and n >= 0}

    def _load(self) -> None:
        ceiling = self._read(self.ceiling_path)
        exact = self._read(self.path, fallback=ceiling is not None)
        self.next.update(self._counts(exact, "next"))
        self.ceiling.update(self._counts(ceiling, "ceiling"))
        trusted = exact is not None and (exact.get("clean") or exact.get("boot_id") == self.boot_id)
        if not trusted and ceiling is not None:
            jumped = {k: c for k, c in self.ceiling.items() if c > self.next[k]}
            if jumped:
                log.warning(
                    "agent state %s may be stale (the node rebooted after an unclean stop): resuming "
                    "at the durable ceiling %s, leaving a gap of at most %d batches per kind instead "
                    "of reusing sequence numbers",
                    self.path,
                    jumped,
                    self.block,
                )
                self.next.update(jumped)
        self._save(clean=False)

    def reserve(self, kind: str) -> int:
        """The seq for the next batch of `kind`, recorded on disk before it is returned."""
        seq = self.next[kind]
        self.next[kind] = seq + 1
        if self.next[kind] > self.ceiling[kind]:
            self.ceiling[kind] = self.next[kind] + self.block
            self._write_ceiling()
        self._save(clean=False)
        return seq

    def floor(self, kind: str, at_least: int) -> None:
        """Makes the next seq of `kind` at least `at_least` (used with what the spool still holds)."""
        if at_least > self.next[kind]:
            log.warning(
                "agent state %s was behind the spool for %s (next seq %d, spool holds %d): raised",
                self.path,
                kind,
                self.next[kind],
                at_least - 1,
            )
            self.next[kind] = at_least
            self.ceiling[kind] = max(self.ceiling[kind], at_least + self.block)
            self._write_ceiling()
            self._save(clean=False)

    def close(self) -> None:
        """A clean stop: the exact state is made durable, so the next start trusts it after a reboot."""
        self._save(clean=True)
        assert self._fd is not None  # _save opened it
        os.close(self._fd)
        self._fd = None

    def _save(self, *, clean: bool) -> None:
        body = json.dumps(
            {
                "version": FORMAT_VERSION,
                "node": self.node,
                "boot_id": self.boot_id,
                "next": self.next,
                "clean": clean,
            }
        ).encode()
        if len(body) > _EXACT_SIZE:
            raise AgentStateError(f"agent state for node {self.node!r} does not fit {_EXACT_SIZE} bytes")
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.pwrite(self._fd, body.ljust(_EXACT_SIZE), 0)  # trailing spaces: still valid JSON
        if clean:
            os.fsync(self._fd)

    def _write_ceiling(self) -> None:
        """Replaces seq.ceiling.json durably (fsync of the file and of the directory's rename)."""
        tmp = self.ceiling_path.with_name(self.ceiling_path.name + ".tmp")
        self.ceiling_path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            json.dump(
                {
                    "version": FORMAT_VERSION,
                    "node": self.node,
                    "boot_id": self.boot_id,
                    "ceiling": self.ceiling,
                },
                f,
            )
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.ceiling_path)
        fd = os.open(self.ceiling_path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
