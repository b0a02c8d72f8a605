"""The statements of a live run run two at a time where the order allows (pipeline/analyzers/schedule.py):
a statement must never start before one before it that writes a table it names, or names the table it
writes, has ended; independent ones must overlap; the first error stops the run."""

import threading

import pytest

from pipeline.analyzers.schedule import Statement, run_statements

T = "CREATE OR REPLACE TABLE {} ENGINE = Memory AS SELECT * FROM {}"
A = frozenset({"tmp_a"})  # a statement in parts counts its parts in tmp_a


class Recorder:
    """An execute that notes each statement's start and end in one sequence, and lets a test hold a
    statement until another has started (`meet`: both must be running at once, or the wait times out)."""

    def __init__(self, meet: tuple[str, ...] = (), fail: str = "", hold: str = "", hold_s: float = 1.0):
        self.events: list[tuple[str, str]] = []
        self.hold, self.hold_s, self.released = hold, hold_s, threading.Event()
        # `hold`'s create waits for `released`, `hold_s` at most
        self.lock = threading.Lock()
        self.meet, self.fail = meet, fail
        self.barrier = threading.Barrier(len(meet)) if meet else None

    def __call__(self, sql: str) -> None:
        with self.lock:
            self.events.append(("start", sql))
        if self.barrier and sql.startswith(("CREATE", "DELETE")) and Statement(sql).writes in self.meet:
            self.barrier.wait(timeout=10)
        if self.hold and sql.startswith(("CREATE", "DELETE")) and Statement(sql).writes == self.hold:
            self.released.wait(timeout=self.hold_s)
        if self.fail and self.fail in sql:
            raise RuntimeError(f"failed: {self.fail}")
        with self.lock:
            self.events.append(("end", sql))

    def at(self, what: str, sql: str) -> int:
        return self.events.index((what, sql))


def no_parts(s: Statement) -> list[Statement]:
    return [s]


def check_order(statements: list[Statement], rec: Recorder) -> None:
    for j, later in enumerate(statements):
        for earlier in statements[:j]:
            if later.must_follow(earlier) and ("start", later.sql) in rec.events:
                assert rec.at("end", earlier.sql) < rec.at("start", later.sql), (earlier.sql, later.sql)


def chain() -> list[Statement]:
    return [
        Statement(T.format("tmp_a", "raw")),
        Statement(T.format("tmp_b", "raw")),  # independent of tmp_a: may overlap it
        Statement(T.format("tmp_c", "tmp_a")),  # reads tmp_a
        Statement("DROP TABLE IF EXISTS tmp_a"),  # after its reader
        Statement(T.format("tmp_d", "tmp_b JOIN tmp_c")),
        Statement("INSERT INTO out SELECT * FROM tmp_d"),
        Statement("DELETE FROM out WHERE x"),  # writes what the insert writes: after it
    ]


def test_one_worker_runs_them_in_order():
    rec, ran = Recorder(), []
    run_statements(chain(), rec, 1, no_parts, ran.append)
    assert [sql for what, sql in rec.events if what == "start"] == [s.sql for s in chain()]
    assert [s.sql for s in ran] == [s.sql for s in chain()]


def test_two_workers_overlap_the_independent_and_keep_every_dependency():
    statements = chain()
    rec, ran = Recorder(meet=("tmp_a", "tmp_b")), []  # tmp_a's and tmp_b's creates must run at once
    run_statements(statements, rec, 2, no_parts, ran.append)
    assert sorted(s.sql for s in ran) == sorted(s.sql for s in statements)
    check_order(statements, rec)


def test_a_delete_runs_beside_as_many_others_as_there_are_workers():
    """A lightweight DELETE mostly waits for the engine's background pool: it takes no worker, and keeps
    its order (the INSERT into its table after it)."""
    statements = [
        Statement("DELETE FROM out WHERE job_id IN (SELECT job_id FROM raw)"),
        Statement(T.format("tmp_a", "raw")),
        Statement(T.format("tmp_b", "raw")),
        Statement("INSERT INTO out SELECT * FROM tmp_a JOIN tmp_b"),
    ]
    assert [s.waits for s in statements] == [True, False, False, False]
    rec, ran = Recorder(meet=("tmp_a", "tmp_b", "out")), []  # all three running at once, on two workers
    run_statements(statements, rec, 2, no_parts, ran.append)
    assert sorted(s.sql for s in ran) == sorted(s.sql for s in statements)
    check_order(statements, rec)


def test_a_delete_waits_for_every_statement_before_it():
    """A run's DELETE removes the output rows its INSERT then replaces: started before the statements it
    does not depend on have ended, it would leave readers without those rows for the whole run."""
    statements = [
        Statement(T.format("tmp_a", "raw")),
        Statement("DELETE FROM out WHERE job_id IN (SELECT job_id FROM raw)"),
    ]
    assert statements[1].must_follow(statements[0])  # though it names no table tmp_a writes
    rec = Recorder(hold="tmp_a")  # tmp_a runs for 1 s
    run_statements(statements, rec, 2, no_parts, lambda s: None)
    assert rec.at("end", statements[0].sql) < rec.at("start", statements[1].sql)


def test_a_statement_whose_target_is_unknown_waits_for_all_and_all_for_it():
    statements = [
        Statement(T.format("tmp_a", "raw")),
        Statement("SYSTEM FLUSH LOGS"),
        Statement(T.format("tmp_b", "raw")),
    ]
    assert statements[1].writes is None
    assert statements[1].must_follow(statements[0]) and statements[2].must_follow(statements[1])
    rec = Recorder()
    run_statements(statements, rec, 2, no_parts, lambda s: None)
    assert [sql for _, sql in rec.events] == [sql for s in statements for sql in (s.sql, s.sql)]


def test_a_name_in_a_column_or_a_filter_counts_as_naming_the_table():
    writes = Statement(T.format("tmp_a", "raw"))
    assert Statement("SELECT x FROM raw WHERE node IN (SELECT node FROM tmp_a)").must_follow(writes)
    assert not Statement(T.format("tmp_b", "raw")).must_follow(writes)
    assert Statement(T.format("tmp_b", "tmp_a_x JOIN tmp_a")).must_follow(writes)
    assert not Statement(T.format("tmp_b", "tmp_a_x")).must_follow(writes)  # a longer name is another


def test_a_statement_in_parts_expands_once_the_table_it_counts_from_is_made():
    """Its parts' number is read off a table made before it (`reads`): it starts once that table and what
    it names are made, while a statement it does not depend on still runs."""
    statements = [
        Statement(T.format("tmp_a", "raw")),
        Statement(T.format("tmp_b", "raw")),
        Statement(T.format("tmp_p", "raw WHERE nn % {parts} = {part}"), label="tmp_p", reads=A),
        Statement(T.format("tmp_q", "tmp_p WHERE nn % {parts} = {part}"), label="tmp_q", reads=A),
        Statement(T.format("tmp_r", "tmp_b")),
    ]
    rec, expanded, ran = Recorder(hold="tmp_b", hold_s=30), [], []  # tmp_b runs until tmp_q is expanded

    def expand(s: Statement) -> list[Statement]:
        if "{part}" not in s.sql:
            return [s]
        assert ("end", statements[0].sql) in rec.events  # the counted table is made
        expanded.append(s.label)
        if s.label == "tmp_q":
            assert ("end", statements[1].sql) not in rec.events  # tmp_b still runs beside the parts
            rec.released.set()
        return [
            Statement(T.format(s.writes, "raw_0")),
            Statement(f"INSERT INTO {s.writes} SELECT 1", s.label),
        ]

    run_statements(statements, rec, 2, expand, ran.append)
    assert expanded == ["tmp_p", "tmp_q"]
    assert sorted(s.label for s in ran if s.label) == ["tmp_p", "tmp_q"]  # each once its last part ran
    for table in ("tmp_p", "tmp_q"):  # each table's parts in order
        assert rec.at("end", T.format(table, "raw_0")) < rec.at("start", f"INSERT INTO {table} SELECT 1")
    assert rec.at("end", "INSERT INTO tmp_p SELECT 1") < rec.at("start", T.format("tmp_q", "raw_0"))
    assert rec.at("end", statements[1].sql) < rec.at("start", statements[4].sql)  # tmp_r reads tmp_b


def test_a_statement_in_parts_waits_for_the_table_it_counts_from():
    """`reads` orders it after the statement making that table, though its text does not name it."""
    statements = [
        Statement(T.format("tmp_a", "raw")),
        Statement(T.format("tmp_p", "raw WHERE nn % {parts} = {part}"), label="tmp_p", reads=A),
    ]
    rec = Recorder(hold="tmp_a")  # tmp_a runs 1 s unless released: tmp_p would start beside it

    def expand(s: Statement) -> list[Statement]:
        if "{part}" not in s.sql:
            return [s]
        assert ("end", statements[0].sql) in rec.events
        return [Statement(T.format("tmp_p", "raw_0"), s.label)]

    run_statements(statements, rec, 2, expand, lambda s: None)
    assert rec.at("end", statements[0].sql) < rec.at("start", T.format("tmp_p", "raw_0"))


def test_a_running_delete_does_not_hold_back_the_statements_in_parts():
    """The parts' number is read off the temp tables made before: a DELETE of output rows still running
    (waiting on the engine's background pool) changes none of them."""
    statements = [
        Statement("DELETE FROM out WHERE x"),
        Statement(T.format("tmp_p", "raw WHERE nn % {parts} = {part}"), label="tmp_p"),
    ]
    rec, ran = Recorder(hold="out"), []  # the DELETE runs until released (1 s at most)

    def expand(s: Statement) -> list[Statement]:
        if "{part}" not in s.sql:
            return [s]
        assert ("end", statements[0].sql) not in rec.events  # expanded while the DELETE runs
        rec.released.set()
        return [Statement(T.format("tmp_p", "raw_0"), s.label)]

    run_statements(statements, rec, 2, expand, ran.append)
    assert sorted(s.label or s.sql for s in ran) == sorted(["DELETE FROM out WHERE x", "tmp_p"])


def test_the_first_error_stops_the_run_after_the_running_statements_end():
    statements = chain()
    rec, ran = Recorder(meet=("tmp_a", "tmp_b"), fail="tmp_b"), []
    with pytest.raises(RuntimeError, match="failed: tmp_b"):
        run_statements(statements, rec, 2, no_parts, ran.append)
    assert ("end", statements[0].sql) in rec.events  # tmp_a, running beside it, ended
    assert ("start", statements[4].sql) not in rec.events  # tmp_d reads tmp_b: never started
    assert statements[1] not in ran
    assert not any(sql.startswith("DELETE") for _, sql in rec.events)
