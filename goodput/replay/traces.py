"""Reading a trace's CSV tolerantly, and saying what was tolerated.

Real trace files drift: a column added, a value left empty, rows out of order. The importers read every
column as text, keep the ones they know, cast them, and count what they had to do: unknown columns
ignored, rows dropped for a missing or unreadable value (per column), rows found out of order (then
sorted), duplicate keys dropped. A file without a column the importer needs is another file altogether:
refused, naming the column."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl


class TraceError(ValueError):
    """A trace file the importer cannot read: one line naming the file and what is wrong."""


@dataclass
class ImportStats:
    """What reading a file tolerated; printed by the replays and returned in their JSON (`import`)."""

    file: str
    rows_read: int = 0
    rows_used: int = 0
    unknown_columns: list[str] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    """Rows dropped, by reason: `missing <column>` (empty or unreadable), `duplicate <key>`, or the
    importer's own checks (e.g. `deleted before scheduled`)."""
    filled: dict[str, int] = field(default_factory=dict)
    """Rows kept with a documented default for an empty optional value, by column."""
    out_of_order: int = 0
    """Rows that came before their predecessor in the trace's order (the file was sorted first)."""

    def drop(self, reason: str, n: int) -> None:
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + n

    def as_dict(self) -> dict:
        return {
            "file": self.file,
            "rows_read": self.rows_read,
            "rows_used": self.rows_used,
            "unknown_columns": self.unknown_columns,
            "dropped": dict(sorted(self.dropped.items())),
            "filled": dict(sorted(self.filled.items())),
            "out_of_order": self.out_of_order,
        }


def read(
    path: Path,
    what: str,
    required: dict[str, type[pl.DataType] | pl.DataType],
    optional: dict[str, type[pl.DataType] | pl.DataType],
    ignored: tuple[str, ...] = (),
) -> tuple[pl.DataFrame, ImportStats]:
    """The file's known columns cast to their types (an unreadable value becomes null), all its rows, and
    the stats so far. `required` columns must exist (TraceError naming the first missing one) and rows
    without a value in them are dropped and counted; `optional` columns may be absent (then all null).
    `ignored`: columns expected and not used (a pandas index column, written with an empty name)."""
    try:
        raw = pl.read_csv(path, infer_schema=False)
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError) as e:
        raise TraceError(f"{path}: not a CSV file {what} can read ({str(e).splitlines()[0]})") from None
    stats = ImportStats(file=str(path), rows_read=raw.height)
    for col in required:
        if col not in raw.columns:
            raise TraceError(
                f"{path}: not {what}: no column {col!r} (it has: {', '.join(raw.columns) or 'none'})"
            )
    known = set(required) | set(optional) | set(ignored)
    stats.unknown_columns = [c for c in raw.columns if c not in known]
    cols = []
    for col, typ in {**required, **optional}.items():
        if col in raw.columns:
            text = pl.col(col).str.strip_chars()
            cols.append(pl.when(text == "").then(None).otherwise(text).cast(typ, strict=False).alias(col))
        else:
            cols.append(pl.lit(None, dtype=typ).alias(col))
    df = raw.select(cols)
    for col in required:
        missing = df[col].null_count()
        stats.drop(f"missing {col}", missing)
        if missing:
            df = df.filter(pl.col(col).is_not_null())
    return df, stats


def sort_counted(df: pl.DataFrame, by: list[str], stats: ImportStats) -> pl.DataFrame:
    """`df` sorted by `by` (stable), counting the rows that sort before the row above them in the file."""
    before = pl.lit(False)
    for col in reversed(by):  # lexicographic: this column smaller, or equal and the rest smaller
        prev = pl.col(col).shift(1)
        before = (pl.col(col) < prev) | ((pl.col(col) == prev) & before)
    stats.out_of_order = int(df.select(before.fill_null(False).sum()).item())
    return df.sort(by, maintain_order=True)


def dedup_counted(df: pl.DataFrame, key: list[str], stats: ImportStats) -> pl.DataFrame:
    """`df` with the first row of each `key` only, counting the others."""
    out = df.unique(subset=key, keep="first", maintain_order=True)
    stats.drop(f"duplicate {'/'.join(key)}", df.height - out.height)
    return out
