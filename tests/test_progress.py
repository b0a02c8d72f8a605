"""Long commands show tqdm's bar on a terminal and plain lines elsewhere (pipeline/progress.py)."""

import io

from pipeline.analyzers.run import step_name
from pipeline.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_each_step_is_one_plain_line():
    out = io.StringIO()
    p = Progress("analyze", 0, stream=out)
    p.grow(2)
    p.step("goodput.sql: INSERT goodput_windows")
    p.grow(1)
    p.step("rollups.sql: DELETE team_day")
    p.step("rollups.sql: INSERT team_day")
    p.done()
    lines = out.getvalue().splitlines()
    assert [ln.split(" after ")[0] for ln in lines[:3]] == [
        "analyze: 1/2 goodput.sql: INSERT goodput_windows",
        "analyze: 2/3 rollups.sql: DELETE team_day",
        "analyze: 3/3 rollups.sql: INSERT team_day",
    ]
    assert lines[3].startswith("analyze: done in ") and "\r" not in out.getvalue()


def test_off_a_terminal_a_quantity_is_a_line_per_tenth():
    out = io.StringIO()
    p = Progress("ingest", 1000, stream=out)
    for done in range(0, 1001, 50):
        p.update(done, "rows/s")
    p.done("1000 records")
    lines = out.getvalue().splitlines()
    assert [ln.split()[1] for ln in lines[:-1]] == [f"{10 * i}%" for i in range(1, 11)]
    assert lines[-1].startswith("ingest: done in ") and lines[-1].endswith("1000 records")


def test_on_a_terminal_tqdm_draws_the_bar():
    out = Terminal()
    p = Progress("load", 10, unit="sim s", stream=out)
    for done in range(1, 11):
        p.update(done)
    p.done("ok")
    text = out.getvalue()
    assert "\r" in text and "0/10" in text and "sim s/s" in text  # tqdm draws at most every 0.1 s
    assert "load: 10%" not in text and text.endswith("load: done in 0.0s ok\n")


def test_quiet_writes_nothing():
    out = Terminal()
    p = Progress("load", 10, stream=out, quiet=True)
    p.update(10)
    p.done("ok")
    assert out.getvalue() == ""


def test_a_statement_is_named_by_its_verb_and_table():
    assert step_name("\n  CREATE OR REPLACE TABLE tmp_events ENGINE = Memory AS\nSELECT 1") == (
        "CREATE tmp_events"
    )
    assert step_name("DELETE FROM team_day WHERE cluster = 'x'") == "DELETE team_day"
    assert step_name("INSERT INTO job_summary (a, b)\nSELECT ...") == "INSERT job_summary"
