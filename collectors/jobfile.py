"""Job lifecycle events from a JSON-lines file, for sites with neither Slurm nor a Kubernetes gang
scheduler: their own scripts append one object per line with the schema.JOB fields.

The file is tailed by byte offset: each tick reads what was appended since the last, only up to the
last complete line (a writer caught mid-line is finished next tick). A file that shrank or was
replaced (new inode: logrotate) is read again from the start. A bad line never stops the tail: it is
returned in `rejected` with its line number and the reason.
"""

from __future__ import annotations

import os
from pathlib import Path

from collectors.base import CollectorError, CollectorUnavailable, Row
from collectors.rows import decode_row


class JobFileCollector:
    """Rows of kind "job" from `path`; `source` defaults to "file" where a line has none."""

    name = "jobfile"
    kind = "job"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self.line_no = 0
        self._inode: int | None = None
        self.rejected: list[dict[str, object]] = []

    def collect(self, now_ms: int) -> list[Row]:
        self.rejected = []
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if st.st_ino != self._inode or st.st_size < self.offset:
                    self._inode, self.offset, self.line_no = st.st_ino, 0, 0
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError as e:
            raise CollectorUnavailable(f"job event file {self.path} does not exist") from e
        except OSError as e:
            raise CollectorError(f"cannot read job event file {self.path}: {e.strerror or e}") from e
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        rows = []
        for raw in complete.splitlines():
            self.line_no += 1
            if not raw.strip():
                continue
            row, reason = decode_row("job", raw, {"source": "file"})
            if reason is None:
                rows.append(row)
            else:
                self.rejected.append(
                    {"line": self.line_no, "text": raw[:200].decode(errors="replace"), "reason": reason}
                )
        return rows
