"""Where an insert into chDB spends the engine's time on today's raw-table schema (issue 19: >= 3 M rows/s).

    .venv/bin/python bench/bench_schema.py [--nodes 256] [--seconds 600] [--repeat 3] [--json out.json]
                                           [--only NAME,...] [--no-engine]

The rows are bench_ingest's (its row builder, imported), completed to the shape the loader hands the store
(pipeline.validate: every field of the kind, null where the agent measured nothing, plain strings, the
batch position), and inserted as the loader inserts them: `ChdbStore.insert_arrow`, in blocks of
`--block` rows ([loader].flush_records) with a deduplication token each. Each variant is a raw table
derived from today's DDL (`pipeline.ddl.raw_table_ddl`) by one edit, which must change the statement, so
a variant cannot drift from the schema it is measured against:

  v2            today's table with its rollup's materialized view (the reference: ratio 1.00)
  v1            today's table without the view (schema version 1)
  and, each on v1: no Nullable (NOT NULL, type defaults), no codecs, no LowCardinality, plain MergeTree,
  the setting optimize_on_insert = 0 (no schema change), `ts` first in ORDER BY, no sort key
  (ORDER BY tuple(), on a MergeTree), no TTL, no deduplication token;
  lean          the floor: MergeTree, same columns, no codecs, no Nullable;
  and v1 and v2 in blocks of 200,000 rows and in one block, and v2 with optimize_on_insert = 0;
  "measured": only the block's columns that hold a value are inserted (the rest read NULL, as before).

All variants run in one process and one store, alternating, `--repeat` times; each run creates its table
(and view), inserts the GPU rows then the NIC rows, and drops them. Besides the Arrow insert, each variant
also takes the same rows by one `INSERT ... SELECT` from a Memory table inside the engine (the engine's
own blocks), which separates reading Arrow from the engine's work. Printed: M rows/s per kind, median
[min-max], and the ratio of medians against v2; --json writes every run.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_ingest import _rows  # noqa: E402

from contracts import catalog  # noqa: E402
from contracts import config as config_mod  # noqa: E402
from contracts.schema import KINDS  # noqa: E402
from pipeline import ddl  # noqa: E402
from pipeline.chdb_store import ChdbStore  # noqa: E402

BENCH_KINDS = ("gpu", "nic")
_ARGS = r"(?:[^()]|\((?:[^()]|\([^()]*\))*\))*"
"""A type's or codec's arguments, up to two levels of parentheses deep (LowCardinality(Nullable(String)))."""


def _sub(pattern: str, repl: str | Callable[[re.Match[str]], str], what: str) -> Callable[[str], str]:
    """An edit of a CREATE TABLE statement that must change it: a schema change that makes the edit a
    no-op fails the bench instead of measuring today's table under another name."""

    def edit(statement: str) -> str:
        out, n = re.subn(pattern, repl, statement)
        if n == 0:
            raise ValueError(f"variant edit {what!r} found nothing to change in:\n{statement}")
        return out

    return edit


def _ts_first(m: re.Match[str]) -> str:
    cols = [c.strip() for c in m[1].split(",")]
    return "ORDER BY (" + ", ".join(["ts"] + [c for c in cols if c != "ts"]) + ")"


NO_NULLABLE = _sub(rf"Nullable\(({_ARGS})\)", r"\1", "no Nullable")
NO_CODECS = _sub(rf" CODEC\({_ARGS}\)", "", "no codecs")
NO_LOWCARD = _sub(rf"LowCardinality\(({_ARGS})\)", r"\1", "no LowCardinality")
MERGETREE = _sub(r"ENGINE = ReplacingMergeTree\b", "ENGINE = MergeTree", "plain MergeTree")
TS_FIRST = _sub(r"ORDER BY \(([^)]*)\)", _ts_first, "ts first in ORDER BY")
NO_SORT = _sub(r"ORDER BY \(([^)]*)\)", "ORDER BY tuple()", "no sort key")
NO_TTL = _sub(r"\nTTL [^\n]*", "", "no TTL")


@dataclass(frozen=True)
class Variant:
    name: str
    edits: tuple[Callable[[str], str], ...] = ()
    views: bool = False
    block: int | None = None  # rows per insert; None: the loader's [loader].flush_records, 0: all in one
    token: bool = True
    settings: tuple[tuple[str, str], ...] = ()  # session settings for its inserts
    measured: bool = False  # insert only the columns with a value in the block (the others read NULL)


NO_OPTIMIZE = (("optimize_on_insert", "0"),)
"""ReplacingMergeTree collapses the duplicate keys inside each inserted block as it writes the part, "as
if merge was done on this block"; with this setting off it writes the block as is and leaves the
duplicates to merges and FINAL, as for duplicates across blocks."""


def variants(flush: int) -> list[Variant]:
    return [
        Variant("v2 (today)", views=True),
        Variant("v1: no view"),
        Variant("no Nullable", (NO_NULLABLE,)),
        Variant("no codecs", (NO_CODECS,)),
        Variant("no LowCardinality", (NO_LOWCARD,)),
        Variant("plain MergeTree", (MERGETREE,)),
        Variant("optimize_on_insert=0", settings=NO_OPTIMIZE),
        Variant("ts first in key", (TS_FIRST,)),
        Variant("no sort key", (MERGETREE, NO_SORT)),
        Variant("no TTL", (NO_TTL,)),
        Variant("no dedup token", token=False),
        Variant("lean floor", (MERGETREE, NO_CODECS, NO_NULLABLE)),
        Variant("v2, blocks 200k", views=True, block=200_000),
        Variant("v1, blocks 200k", block=200_000),
        Variant("v2, one block", views=True, block=0),
        Variant("v1, one block", block=0),
        Variant("v2, optimize_on_insert=0", views=True, settings=NO_OPTIMIZE),
        Variant("v2, 200k, optimize_on_insert=0", views=True, block=200_000, settings=NO_OPTIMIZE),
        Variant("v2, 200k, opt=0, no Nullable", (NO_NULLABLE,), True, 200_000, settings=NO_OPTIMIZE),
        Variant("v2, 200k, opt=0, no codecs", (NO_CODECS,), True, 200_000, settings=NO_OPTIMIZE),
        Variant("v2, 200k, opt=0, no LowCard.", (NO_LOWCARD,), True, 200_000, settings=NO_OPTIMIZE),
        Variant("v2, measured columns", views=True, measured=True),
        Variant("v2, 200k, opt=0, measured", views=True, block=200_000, settings=NO_OPTIMIZE, measured=True),
        Variant("lean, 200k, measured", (MERGETREE, NO_CODECS, NO_NULLABLE), block=200_000, measured=True),
    ]


def variant_ddl(kind: str, variant: Variant, table: str) -> str:
    statement = ddl.raw_table_ddl(KINDS[kind])
    head = f"CREATE TABLE IF NOT EXISTS {catalog.RAW_TABLES[kind]} ("
    if not statement.startswith(head):
        raise ValueError(f"today's {kind} DDL does not start with {head!r}: update bench_schema.py")
    statement = f"CREATE TABLE {table} (" + statement[len(head) :]
    for edit in variant.edits:
        statement = edit(statement)
    return statement


def loader_shape(kind: str, table: pa.Table) -> pa.Table:
    """bench_ingest's rows as pipeline.validate hands them to the store: every field of the kind in
    raw-table column order (null where nothing was measured), plain strings, seq and batch_row."""
    k = KINDS[kind]
    n = table.num_rows
    cols: dict[str, pa.Array] = {}
    for name in ["cluster", k.sender_column] + [ddl.column_name(f) for f in k.fields]:
        f = next((f for f in k.fields if ddl.column_name(f) == name), None)
        typ = pa.string() if f is None else ddl.arrow_type(f)
        if name in table.column_names:
            col = table.column(name).combine_chunks()
            if pa.types.is_dictionary(col.type):
                col = col.dictionary_decode()
            cols[name] = col.cast(typ)
        else:
            cols[name] = pa.nulls(n, typ)
    cols["seq"] = table.column("seq").combine_chunks()
    cols["batch_row"] = pa.array(np.arange(n, dtype=np.uint32))
    return pa.table(cols)


def _create(store: ChdbStore, kind: str, variant: Variant, table: str) -> None:
    store.execute(variant_ddl(kind, variant, table))
    if variant.views:
        rollup = ddl.rollup_table_ddl(kind).replace(
            f"EXISTS {catalog.ROLLUP_TABLES[kind]} ", f"EXISTS {table}_rollup ", 1
        )
        store.execute(rollup)
        store.execute(
            f"CREATE MATERIALIZED VIEW {table}_mv TO {table}_rollup AS\n{ddl.rollup_select(kind, table)}"
        )


def _drop(store: ChdbStore, table: str) -> None:
    for name in (f"{table}_mv", table, f"{table}_rollup"):
        store.execute(f"DROP TABLE IF EXISTS {name} SYNC")


@contextmanager
def _prepared(store: ChdbStore, kind: str, variant: Variant) -> Iterator[str]:
    """A fresh table of the variant (and its view) with the variant's session settings, dropped after."""
    table = f"bench_{kind}"
    _drop(store, table)
    _create(store, kind, variant, table)
    before = {
        name: store.query_arrow(f"SELECT toString(getSetting('{name}')) AS v").column("v")[0].as_py()
        for name, _ in variant.settings
    }
    for name, value in variant.settings:
        store.execute(f"SET {name} = {value}")
    try:
        yield table
    finally:
        for name, value in before.items():
            store.execute(f"SET {name} = {int(value == 'true') if value in ('true', 'false') else value}")
        _drop(store, table)


def run_arrow(
    store: ChdbStore,
    kind: str,
    variant: Variant,
    rows: pa.Table,
    flush: int,
    tag: str,
    after: Callable[[str], None] | None = None,
) -> float:
    """Seconds to insert `rows` into a fresh table of the variant, in its blocks, as the loader does;
    `after` sees the table before it is dropped."""
    block = flush if variant.block is None else variant.block or rows.num_rows
    with _prepared(store, kind, variant) as table:
        started = time.perf_counter()
        for k, start in enumerate(range(0, rows.num_rows, block)):
            token = f"{tag}-{k}" if variant.token else None
            part = rows.slice(start, block)
            if variant.measured:
                part = part.select(
                    [c for c in part.column_names if part.column(c).null_count < part.num_rows]
                )
            store.insert_arrow(table, part, token)
        took = time.perf_counter() - started
        if after is not None:
            after(table)
        return took


def run_engine(
    store: ChdbStore, kind: str, variant: Variant, source: str, after: Callable[[str], None] | None = None
) -> float:
    """Seconds for one `INSERT ... SELECT` of the same rows from a Memory table inside the engine."""
    with _prepared(store, kind, variant) as table:
        started = time.perf_counter()
        store.execute(f"INSERT INTO {table} SELECT * FROM {source}")
        took = time.perf_counter() - started
        if after is not None:
            after(table)
        return took


def make_source(store: ChdbStore, kind: str, rows: pa.Table) -> str:
    """A Memory table holding `rows` in today's column types (without codecs, which Memory refuses)."""
    source = f"source_{kind}"
    memory = variant_ddl(kind, Variant("source", (NO_CODECS,)), source)
    store.execute(memory.split("\nENGINE", 1)[0] + "\nENGINE = Memory")
    store.insert_arrow(source, rows)
    return source


def _summary(rows: int, secs: list[float]) -> dict:
    s = sorted(secs)
    return {
        "runs_s": secs,
        "median_rows_per_s": rows / statistics.median(s),
        "min_rows_per_s": rows / s[-1],
        "max_rows_per_s": rows / s[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", help="variant names separated by ; (default: all)")
    ap.add_argument("--no-engine", action="store_true", help="skip the INSERT SELECT inside the engine")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    flush = config_mod.load().loader.flush_records
    chosen = variants(flush)
    if args.only:
        names = {n.strip() for n in args.only.split(";")}
        unknown = names - {v.name for v in chosen}
        if unknown:
            ap.error(f"no variant {', '.join(sorted(unknown))}; have: {', '.join(v.name for v in chosen)}")
        chosen = [v for v in chosen if v.name in names]
    t0_ms = (int(time.time()) - 7200) // 3600 * 3600 * 1000
    data = {k: loader_shape(k, _rows(k, args.nodes, args.seconds, t0_ms)) for k in BENCH_KINDS}
    print(
        f"rows: {', '.join(f'{k} {t.num_rows:,} x {t.num_columns} columns' for k, t in data.items())}; "
        f"loader blocks of {flush:,}; {args.repeat} runs per variant, alternating",
        flush=True,
    )
    modes = ("arrow",) if args.no_engine else ("arrow", "engine")
    secs: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, ChdbStore(Path(tmp) / "store") as store:
        sources = {kind: make_source(store, kind, rows) for kind, rows in data.items()}
        run_arrow(store, "gpu", chosen[0], data["gpu"].slice(0, 2 * flush), flush, "warm-up")  # untimed
        for i in range(args.repeat):
            for v in chosen:
                for kind, rows in data.items():
                    tag = f"r{i}-{kind}"
                    secs.setdefault((v.name, kind, "arrow"), []).append(
                        run_arrow(store, kind, v, rows, flush, tag)
                    )
                    if "engine" in modes and v.block is None and v.token:
                        secs.setdefault((v.name, kind, "engine"), []).append(
                            run_engine(store, kind, v, sources[kind])
                        )
                print(
                    f"  {i + 1}/{args.repeat} {v.name}: "
                    + ", ".join(
                        f"{k} {data[k].num_rows / secs[(v.name, k, 'arrow')][-1] / 1e6:.2f}" for k in data
                    )
                    + " M rows/s",
                    flush=True,
                )
    result: dict = {
        "rows": {k: t.num_rows for k, t in data.items()},
        "block": flush,
        "repeat": args.repeat,
        "variants": {},
    }
    ref = chosen[0].name
    head = f"{'variant':32s}" + "".join(f" | {k} {m} M rows/s  [min-max]  ratio" for k in data for m in modes)
    print(head)
    for v in chosen:
        line = f"{v.name:32s}"
        out: dict = {}
        for kind, rows in data.items():
            for mode in modes:
                got = secs.get((v.name, kind, mode))
                if not got:
                    line += f" | {'':>34s}"
                    continue
                s = _summary(rows.num_rows, got)
                base = secs.get((ref, kind, mode))
                s["ratio"] = statistics.median(base) / statistics.median(got) if base else None
                out[f"{kind}_{mode}"] = s
                ratio = f"{s['ratio']:.2f}x" if s["ratio"] else "-"
                line += (
                    f" | {s['median_rows_per_s'] / 1e6:6.2f}  [{s['min_rows_per_s'] / 1e6:.2f}-"
                    f"{s['max_rows_per_s'] / 1e6:.2f}]  {ratio:>6s}"
                )
        result["variants"][v.name] = out
        print(line)
    print(f"ratio: rows/s against {ref!r} (median over median), same kind and mode")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
