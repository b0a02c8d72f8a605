"""Per-(node, kind) batch sequence numbers that survive agent restarts.

Why it matters: the loader identifies a batch by (cluster, node, kind, seq) and stores a repeated seq
once. An agent that restarted from 0 would have its new batches dropped as duplicates of old ones —
silent loss. So every seq is *reserved* on disk before the batch carrying it is written to the spool:
a crash between the two leaves a gap of one (visible as loss of nothing: no batch had that seq), never
a reuse.

The file is replaced atomically (write a temporary file, rename), so a kill at any moment leaves the
old or the new state, never a torn one. With `fsync` true the rename is made durable too, so the state
survives a power loss as well; the spool's fsync policy decides (agents/config.py).

As a second line of defence `floor()` lets the agent raise the state to one past the highest seq found
in its spool at start-up: if the state file was lost or restored from an old image, batches still in
the spool tell the truth.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from collectors.schema import KINDS

log = logging.getLogger(__name__)
FORMAT_VERSION = 1


class AgentStateError(RuntimeError):
    """The state file cannot be trusted; the message says how to repair it."""


class SeqState:
    def __init__(self, path: str | os.PathLike, node: str, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.node = node
        self.fsync = fsync
        self.next: dict[str, int] = {k: 0 for k in KINDS}
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            raise AgentStateError(
                f"agent state {self.path} is unreadable ({e}). Restore it from a backup, or write "
                f'{{"node": "{self.node}", "next": {{"<kind>": <n>}}}} with n above the highest seq the '
                f"loader stored for this node (SELECT kind, max(seq) FROM ingested_batches WHERE node = "
                f"'{self.node}' GROUP BY kind): restarting at 0 would make the loader drop new batches "
                f"as duplicates") from None
        if data.get("node") not in (None, self.node):
            raise AgentStateError(
                f"agent state {self.path} belongs to node {data.get('node')!r}, not {self.node!r}: each node "
                f"needs its own state_dir (a copied disk image or a shared volume?)")
        for kind, n in data.get("next", {}).items():
            if kind in self.next and isinstance(n, int) and n >= 0:
                self.next[kind] = n

    def reserve(self, kind: str) -> int:
        """The seq for the next batch of `kind`, recorded on disk before it is returned."""
        seq = self.next[kind]
        self.next[kind] = seq + 1
        self._save()
        return seq

    def floor(self, kind: str, at_least: int) -> None:
        """Makes the next seq of `kind` at least `at_least` (used with what the spool still holds)."""
        if at_least > self.next[kind]:
            log.warning("agent state %s was behind the spool for %s (next seq %d, spool holds %d): raised",
                        self.path, kind, self.next[kind], at_least - 1)
            self.next[kind] = at_least
            self._save()

    def _save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            json.dump({"version": FORMAT_VERSION, "node": self.node, "next": self.next}, f)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if self.fsync:
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
