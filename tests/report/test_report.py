"""The daily report on simulator data: every number equals the analyzer table it came from (recomputed
here with SQL of its own, the day cut in the reader's time zone by ClickHouse, not by the report's code),
totals reconcile to the allocated GPU-hours, hostile names are escaped, and the HTML renders in Debian's
headless Chromium with its charts and, for `--lang zh`, real CJK glyphs."""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import re
import shutil
import subprocess
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import msgspec
import polars as pl
import pytest
from PIL import Image, ImageChops

from contracts import catalog
from contracts import config as config_mod
from goodput.cli import main
from goodput.demo import run_demo
from goodput.sim.cluster import PlannedFailure
from pipeline.chdb_store import ChdbStore
from pipeline.report.build import build
from pipeline.report.i18n import LABELS
from pipeline.report.write import REPORT_VERSION, slug, write
from pipeline.summary import display_width, format_team_table
from tests.fixtures.ports import free_port

TZ = "Asia/Shanghai"
NAME = "<script>alert(\"x\")</script> {q} '语音'"
"""A team name with markup, quotes, format braces and Chinese: the speech team's, in this test."""


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    text = config_mod.EXAMPLE_CONFIG.read_text()
    assert 'speech = ["asr"]' in text and 'timezone = "UTC"' in text
    text = text.replace('speech = ["asr"]', f'{json.dumps(NAME)} = ["asr"]')
    text = text.replace('timezone = "UTC"', f'timezone = "{TZ}"')
    (tmp / "in.toml").write_text(text)
    # 03:00-06:00 UTC yesterday is 11:00-14:00 in Shanghai: one whole local day, whatever the hour the
    # test runs (a span ending now crosses Shanghai's midnight when run after 16:00 UTC, and what each
    # day holds then depends on the minute), and recent enough that no TTL has dropped any of it.
    end = datetime.combine(datetime.now(UTC).date() - timedelta(days=1), time(6), UTC)
    res = run_demo(
        gpus=64,
        hours=3,
        seed=2,
        out=tmp / "demo",
        config_path=str(tmp / "in.toml"),
        quiet=True,
        end_ms=int(end.timestamp()) * 1000,
        sim_overrides={"planned_failures": (PlannedFailure(job_index=0, after_running_s=1500, kind="xid"),)},
    )
    cfg = config_mod.load(tmp / "demo" / "config.toml")
    cfg = msgspec.structs.replace(cfg, report=config_mod.parse({"report": {"timezone": TZ}}).report)
    store = ChdbStore(tmp / "demo" / "store")
    day_rows = store.query_arrow(
        "SELECT toDate(window_start, {tz:String}) AS d, sum(gpu_seconds) AS s FROM goodput_windows "
        "GROUP BY d ORDER BY s DESC",
        {"tz": TZ},
    ).to_pylist()
    yield {"cfg": cfg, "store": store, "day": day_rows[0]["d"], "tmp": tmp, "demo": res}
    store.close()


@pytest.fixture(scope="module")
def report(demo):
    return build(demo["store"], demo["cfg"], demo["day"])


def q(store, sql, **params) -> list[dict]:
    return store.query_arrow(sql, params).to_pylist()


def test_team_numbers_equal_goodput_windows_of_the_local_day(demo, report):
    store, day = demo["store"], demo["day"]
    rows = q(
        store,
        "SELECT team, category, sum(gpu_seconds) / 3600 AS h, sum(cost) AS c FROM goodput_windows "
        "WHERE toDate(window_start, {tz:String}) = {d:Date} GROUP BY team, category",
        tz=TZ,
        d=day.isoformat(),
    )
    want: dict[str, dict[str, tuple[float, float]]] = {}
    for r in rows:
        want.setdefault(r["team"], {})[r["category"]] = (r["h"], r["c"])
    teams = {p.team: p for p in report.pages if p.team is not None}
    assert set(teams) == set(want) and NAME in teams
    for team, cats in want.items():
        page = teams[team]
        alloc = sum(h for h, _ in cats.values())
        assert page.numbers["allocated_gpu_hours"] == pytest.approx(alloc, abs=1e-9)
        got = {r["category"]: r for r in page.tables["categories"].to_dicts()}
        for c, (h, cost) in cats.items():
            assert got[c]["gpu_hours"] == pytest.approx(h, abs=1e-9)
            assert got[c]["cost"] == pytest.approx(cost, abs=1e-6)
            assert got[c]["pct"] == pytest.approx(100 * h / alloc)
        prod = cats.get("productive", (0.0, 0.0))[0]
        assert page.numbers["goodput_pct"] == pytest.approx(100 * prod / alloc)
        assert page.numbers["waste_cost"] == pytest.approx(
            sum(c for k, (_, c) in cats.items() if k != "productive"), abs=1e-6
        )
        # The categories, the accounts and the trend's day each add up to the allocated time.
        assert page.tables["categories"]["gpu_hours"].sum() == pytest.approx(alloc)
        assert page.tables["accounts"]["allocated_gpu_hours"].sum() == pytest.approx(alloc)
        trend = page.tables["trend"].filter(pl.col("day") == day)
        assert trend["allocated_gpu_hours"][0] == pytest.approx(alloc)
        assert page.numbers["target_goodput_pct"] == demo["cfg"].report.target(team)


def test_totals_reconcile_to_allocated_and_capacity(demo, report):
    store, day = demo["store"], demo["day"]
    cluster = report.pages[0]
    assert cluster.team is None
    teams_total = sum(p.numbers["allocated_gpu_hours"] for p in report.pages[1:])  # type: ignore[misc]
    assert cluster.numbers["allocated_gpu_hours"] == pytest.approx(teams_total)
    assert report.coverage["allocated_gpu_hours"] == pytest.approx(teams_total)
    (cap,) = q(
        store,
        "SELECT sum(allocated_gpu_s) / 3600 AS a, sum(capacity_gpu_s) / 3600 AS c, "
        "sum(unallocated_gpu_s) / 3600 AS u FROM pool_capacity "
        "WHERE toDate(bucket_start, {tz:String}) = {d:Date}",
        tz=TZ,
        d=day.isoformat(),
    )
    # pool_capacity's hourly buckets fall wholly inside Shanghai's day (UTC+8): same total, same split.
    assert cap["a"] == pytest.approx(teams_total, rel=1e-9)
    assert cluster.numbers["capacity_gpu_hours"] == pytest.approx(cap["c"])
    assert cluster.numbers["unallocated_gpu_hours"] == pytest.approx(cap["u"])
    pools = cluster.tables["pools"]
    assert pools["allocated_gpu_hours"].sum() == pytest.approx(teams_total)


def test_coverage_equals_its_tables(demo, report):
    store, d = demo["store"], demo["day"].isoformat()
    (w,) = q(
        store,
        "SELECT sumIf(gpu_seconds, startsWith(evidence, 'no telemetry from node')) / 3600 AS silent, "
        "toUnixTimestamp(max(computed_at)) AS at FROM goodput_windows "
        "WHERE toDate(window_start, {tz:String}) = {d:Date}",
        tz=TZ,
        d=d,
    )
    dead = q(
        store,
        "SELECT reason, count() AS n FROM dead_letters WHERE toDate(received_at, {tz:String}) = {d:Date} "
        "GROUP BY reason",
        tz=TZ,
        d=d,
    )
    c = report.coverage
    assert c["silent_gpu_hours"] == pytest.approx(w["silent"])
    assert c["dead_letters"] == {r["reason"]: r["n"] for r in dead}
    assert c["analyzed_at"] == datetime.fromtimestamp(w["at"], UTC).isoformat(
        timespec="milliseconds"
    ).replace("+00:00", "Z")
    # Re-analysed after the day means analysed over an hour past its end (the demo's day is yesterday's).
    day_end = datetime.combine(date.fromisoformat(d), time.min, ZoneInfo(TZ)) + timedelta(days=1)
    assert c["reanalyzed_after_day"] is (w["at"] > day_end.timestamp() + 3600)


def test_jobs_queue_and_idle_equal_their_tables(demo, report):
    store, day = demo["store"], demo["day"]
    d = day.isoformat()
    waste = {
        r["job_id"]: r
        for r in q(
            store,
            "SELECT job_id, sumIf(gpu_seconds, category != 'productive') / 3600 AS w, "
            "sumIf(cost, category != 'productive') AS c, sum(gpu_seconds) / 3600 AS a FROM goodput_windows "
            "WHERE toDate(window_start, {tz:String}) = {d:Date} GROUP BY job_id",
            tz=TZ,
            d=d,
        )
    }
    by_cat: dict[str, dict[str, float]] = {}
    for r in q(
        store,
        "SELECT job_id, category, sum(gpu_seconds) / 3600 AS h FROM goodput_windows "
        "WHERE toDate(window_start, {tz:String}) = {d:Date} GROUP BY job_id, category",
        tz=TZ,
        d=d,
    ):
        by_cat.setdefault(r["job_id"], {})[r["category"]] = r["h"]
    sm = {r["job_id"]: r["sm_active_pct"] for r in q(store, "SELECT job_id, sm_active_pct FROM job_summary")}
    sched = q(
        store,
        "SELECT team, queue_wait_s FROM scheduling_delay WHERE toDate(submitted, {tz:String}) = {d:Date}",
        tz=TZ,
        d=d,
    )
    for page in report.pages[1:]:
        top = page.tables["top_jobs"]
        assert top.height > 0
        for r in top.to_dicts():
            assert r["waste_gpu_hours"] == pytest.approx(waste[r["job_id"]]["w"])
            assert r["waste_cost"] == pytest.approx(waste[r["job_id"]]["c"])
            assert r["allocated_gpu_hours"] == pytest.approx(waste[r["job_id"]]["a"])
            assert r["sm_active_pct"] == pytest.approx(sm[r["job_id"]])
            cats = by_cat[r["job_id"]]
            top_cat = max((c for c in cats if c != "productive"), key=lambda c: (cats[c], c))
            assert r["loss_category"] in {c for c in cats if c != "productive" and cats[c] == cats[top_cat]}
            assert r["loss_pct"] == pytest.approx(100 * cats[r["loss_category"]] / waste[r["job_id"]]["a"])
        waits = sorted(
            r["queue_wait_s"] for r in sched if r["team"] == page.team and r["queue_wait_s"] is not None
        )
        for key, quant in (("queue_wait_p50_s", 0.5), ("queue_wait_p95_s", 0.95)):
            want = waits[max(math.ceil(quant * len(waits)), 1) - 1] if waits else None
            assert page.numbers[key] == want
    # Straggler episodes overlapping the day, per team, as the table holds them.
    day_start, day_end = report.start_ms // 1000, report.end_ms // 1000
    episodes = q(
        store,
        "SELECT job_id, count() AS n FROM straggler_episodes WHERE toUnixTimestamp(start) < {b:Int64} "
        "AND toUnixTimestamp(end) > {a:Int64} GROUP BY job_id",
        a=day_start,
        b=day_end,
    )
    for page in report.pages[1:]:
        assert set(page.tables["straggler_episodes"]["job_id"].to_list()) <= set(waste)
    assert sum(p.tables["straggler_episodes"].height for p in report.pages[1:]) == sum(
        r["n"] for r in episodes
    )
    (idle,) = q(
        store,
        "SELECT sum(reclaimable_s) / 3600 AS h FROM idle_allocations WHERE "
        "toDate(idle_from, {tz:String}) <= {d:Date} AND toDate(idle_to, {tz:String}) >= {d:Date}",
        tz=TZ,
        d=d,
    )
    got = sum(p.numbers["reclaimable_gpu_hours"] for p in report.pages[1:])  # type: ignore[misc]
    assert got == pytest.approx(idle["h"] or 0.0)


def test_recommendations_hold_their_numbers(demo, report):
    store, d = demo["store"], demo["day"].isoformat()
    day = {"tz": TZ, "d": d}
    kinds = [r["kind"] for p in report.pages[1:] for r in p.recommendations]
    assert "checkpoint_interval" in kinds, kinds
    for page in report.pages[1:]:
        for r in page.recommendations:
            if r["kind"] == "checkpoint_interval":
                (j,) = q(
                    store,
                    "SELECT sum(gpu_seconds) AS a, sumIf(gpu_seconds, category = 'checkpoint') AS c, "
                    "any(window_s) AS w FROM goodput_windows WHERE job_id = {j:String} "
                    "AND toDate(window_start, {tz:String}) = {d:Date}",
                    j=r["job_id"],
                    **day,
                )
                (g,) = q(store, "SELECT gpus FROM job_summary WHERE job_id = {j:String}", j=r["job_id"])
                (f,) = q(
                    store,
                    "SELECT count() AS n FROM faults WHERE job_id = {j:String} AND owner = 'job' "
                    "AND toDate(ts, {tz:String}) = {d:Date}",
                    j=r["job_id"],
                    **day,
                )
                starts = [
                    x["t"]
                    for x in q(
                        store,
                        "SELECT DISTINCT toUnixTimestamp(window_start) AS t FROM goodput_windows "
                        "WHERE job_id = {j:String} AND category = 'checkpoint' "
                        "AND toDate(window_start, {tz:String}) = {d:Date} ORDER BY t",
                        j=r["job_id"],
                        **day,
                    )
                ]
                saves = sum(1 for i, t in enumerate(starts) if i == 0 or t - starts[i - 1] != j["w"])
                cost = j["c"] / g["gpus"] / saves
                mtbf = j["a"] / g["gpus"] / f["n"]
                assert (r["failures"], r["saves"]) == (f["n"], saves)
                assert r["checkpoint_cost_s"] == pytest.approx(cost)
                assert r["mtbf_s"] == pytest.approx(mtbf)
                assert r["recommended_interval_s"] == pytest.approx(math.sqrt(2 * cost * mtbf))
                assert r["current_interval_s"] == pytest.approx(j["a"] / g["gpus"] / saves)
            elif r["kind"] == "gang_too_large":
                (m,) = q(
                    store,
                    "SELECT max(free_gpus) AS m FROM pool_fragmentation WHERE pool = {p:String} "
                    "AND toDate(window_start, {tz:String}) = {d:Date}",
                    p=r["pool"],
                    **day,
                )
                assert r["max_free_gpus"] == m["m"] < r["gpus_requested"] and r["gang_wait_s"] >= 60
            elif r["kind"] == "drain_node":
                row = page.tables["stragglers"].row(0, named=True)
                assert (r["node"], r["gpu"], r["gpu_hours"]) == (row["node"], row["gpu"], row["gpu_hours"])
            else:
                assert r["kind"] == "storage"
                assert r["data_stall_gpu_hours"] <= page.numbers["allocated_gpu_hours"]  # type: ignore[operator]


def test_files_json_csv_and_parquet_hold_the_same_numbers(demo, report, tmp_path):
    # The demo wrote its own report of the day its data ends (the README's first command ends there).
    shown = demo["demo"]["report"]
    assert shown[0] == demo["tmp"] / "demo" / "report" / "cluster.html" and all(p.exists() for p in shown)
    pages = write(report, tmp_path, "en")
    assert [p.name for p in pages] == [f"{slug(p)}.html" for p in report.pages]
    doc = json.loads((tmp_path / "report.json").read_text())
    assert (
        doc["version"] == REPORT_VERSION and doc["timezone"] == TZ and doc["day"] == demo["day"].isoformat()
    )
    for jp, page in zip(doc["pages"], report.pages, strict=True):
        assert jp["team"] == page.team and jp["numbers"] == page.numbers
        for name, frame in page.tables.items():
            assert len(jp["tables"][name]) == frame.height
            base = tmp_path / "tables" / slug(page) / name
            assert pl.read_parquet(base.with_suffix(".parquet")).equals(frame)
            assert pl.read_csv(base.with_suffix(".csv")).height == frame.height


def test_hostile_team_name_is_escaped_and_shown(demo, report, tmp_path):
    write(report, tmp_path, "en")
    page = next(p for p in report.pages if p.team == NAME)
    text = (tmp_path / f"{slug(page)}.html").read_text()
    assert "<script" not in text
    assert html.escape(NAME) in text
    # Top jobs say their loss in words (and in Chinese under --lang zh).
    top = page.tables["top_jobs"].row(0, named=True)
    assert html.escape(f"lost {top['loss_pct']:.0f}% to {LABELS['en'][top['loss_category']]}") in text
    write(report, tmp_path / "zh", "zh")
    zh = (tmp_path / "zh" / f"{slug(page)}.html").read_text()
    assert f"因{LABELS['zh'][top['loss_category']]}损失 {top['loss_pct']:.0f}%" in zh
    md = (tmp_path / f"{slug(page)}.md").read_text()
    assert "<script>" not in md and r"\<script\>" in md and "语音" in md
    assert (
        json.loads((tmp_path / "report.json").read_text())["pages"][report.pages.index(page)]["team"] == NAME
    )
    # The browser reads the name back as text, and no script element exists in its DOM.
    dom = _chromium(["--dump-dom", (tmp_path / f"{slug(page)}.html").as_uri()]).stdout
    assert "<script" not in dom and html.escape(NAME, quote=False) in dom


def test_day_without_data_says_so_and_summary_says_units_and_unallocated(demo, tmp_path, capsys):
    cfg = demo["tmp"] / "demo" / "config.toml"
    store = demo["store"]
    store.close()  # the command opens the directory itself
    try:
        assert main(["report", "--config", str(cfg), "--day", "2020-01-01", "--out", str(tmp_path)]) == 0
        assert "no data that day" in capsys.readouterr().err
        assert main(["report", "--config", str(cfg), "--day", "2020-13-01", "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "YYYY-MM-DD" in err
        # --team: the cluster page and that team's only; --send with nothing configured: one line, exit 2.
        one = tmp_path / "one"
        args = [
            "report",
            "--config",
            str(cfg),
            "--day",
            demo["day"].isoformat(),
            "--team",
            NAME,
            "--out",
            str(one),
        ]
        assert main(args) == 0
        assert [p["team"] for p in json.loads((one / "report.json").read_text())["pages"]] == [None, NAME]
        capsys.readouterr()
        assert main([*args, "--send"]) == 2
        assert "--send needs [report.mail] smtp_host or [report] webhook_url" in capsys.readouterr().err
        assert main(["summary", "--config", str(cfg)]) == 0
        out = capsys.readouterr().out
        assert "(hours in GPU-h" in out
        with ChdbStore(demo["tmp"] / "demo" / "store") as store:
            (cap,) = q(
                store,
                "SELECT sum(capacity_gpu_s) / 3600 AS c, sum(unallocated_gpu_s) / 3600 AS u "
                "FROM pool_capacity",
            )
        assert f"unallocated capacity: {cap['u']:.1f} of {cap['c']:.1f} GPU-h" in out
    finally:
        demo["store"] = ChdbStore(demo["tmp"] / "demo" / "store")
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["empty"] is True and doc["pages"][0]["numbers"]["allocated_gpu_hours"] == 0
    assert LABELS["en"]["no_data"] in (tmp_path / "cluster.html").read_text()


def _chromium(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium")
    assert exe, "Debian's chromium is missing: run `bash .ci/install.d/report.sh` as root"
    return subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    )


def _screenshot(page: Path, out: Path, env: dict | None = None) -> Image.Image:
    _chromium(["--window-size=1200,1800", f"--screenshot={out}", page.as_uri()], env)
    return Image.open(out).convert("RGB")


def _count(img: Image.Image, rgb: tuple[int, int, int], tol: int = 12) -> int:
    return sum(
        n
        for n, px in img.getcolors(img.width * img.height)
        if all(abs(a - b) <= tol for a, b in zip(px, rgb, strict=True))
    )


def test_html_renders_in_chromium_with_its_charts(report, tmp_path):
    write(report, tmp_path, "en")
    page = report.pages[1]
    path = tmp_path / f"{slug(page)}.html"
    pngs = [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', path.read_text())]
    assert len(pngs) == 2  # waterfall and trend
    for png in pngs:
        w, h = Image.open(io.BytesIO(png)).size
        assert w >= 600 and h >= 250
    img = _screenshot(path, tmp_path / "shot.png")
    assert img.size == (1200, 1800)
    white = _count(img, (255, 255, 255), tol=3)
    assert white < 0.97 * img.width * img.height  # not blank
    # The waterfall's productive bar (Okabe-Ito green) and allocated bar are drawn in the page.
    assert _count(img, (0x00, 0x9E, 0x73)) > 2000
    assert _count(img, (0x44, 0x44, 0x44), tol=2) > 2000


def test_zh_renders_real_cjk_glyphs(report, tmp_path):
    write(report, tmp_path / "zh", "zh")
    page = tmp_path / "zh" / "cluster.html"
    assert "集群" in page.read_text()
    with_font = _screenshot(page, tmp_path / "zh.png").crop((0, 0, 1200, 120))
    # The same page with fontconfig shown only DejaVu (no CJK font): the CJK title turns to boxes.
    conf = tmp_path / "fonts.conf"
    conf.write_text(
        '<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd"><fontconfig>'
        "<dir>/usr/share/fonts/truetype/dejavu</dir>"
        f"<cachedir>{tmp_path / 'fc-cache'}</cachedir></fontconfig>"
    )

    env = {**os.environ, "FONTCONFIG_FILE": str(conf)}
    without = _screenshot(page, tmp_path / "tofu.png", env).crop((0, 0, 1200, 120))
    hist = ImageChops.difference(with_font, without).convert("L").histogram()
    diff = sum(hist) - hist[0]
    assert diff > 500, "the CJK title looks the same without a CJK font: no real glyphs drawn"


def test_summary_aligns_cjk_team_names_and_says_its_units():
    cols = {
        "team": ["语音识别团队", "vision"],
        "allocated_gpu_hours": [12.5, 3.0],
        "goodput_pct": [50.0, 90.0],
    }
    for c in catalog.CATEGORIES:
        cols[f"{c}_gpu_hours"] = [1.0, 1.0]
    cols["cost"], cols["waste_cost"] = [10.0, 2.0], [5.0, 1.0]
    text = format_team_table(pl.DataFrame(cols), "USD")
    lines = text.splitlines()
    table = lines[:-1]
    assert len({display_width(ln) for ln in table}) == 1, text
    assert "GPU-h" in lines[-1]
    # The GPU-h column ends at the same terminal column after a Chinese name as after a Latin one.
    ends = {display_width(ln[: ln.index(v) + len(v)]) for ln, v in ((table[2], "12.5"), (table[3], "3.0"))}
    assert len(ends) == 1, text


def test_report_config_refuses_a_bad_time_zone():
    with pytest.raises(
        config_mod.ConfigError, match=r"\[report\]\.timezone: 'Mars/Base' is no IANA time zone"
    ):
        config_mod.parse({"report": {"timezone": "Mars/Base"}})


def test_day_is_the_readers_not_utcs(demo):
    """The same store, cut at UTC midnight and at Shanghai's: different windows make the day."""
    utc = msgspec.structs.replace(demo["cfg"], report=config_mod.parse({}).report)
    a = build(demo["store"], utc, demo["day"])
    b = build(demo["store"], demo["cfg"], demo["day"])
    assert a.start_ms - b.start_ms == 8 * 3600 * 1000
    assert isinstance(demo["day"], date)


class _Inbox:
    """aiosmtpd handler: keeps every message it is handed."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], bytes]] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's hook name)
        self.messages.append((list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


def test_send_mails_cid_images_and_posts_markdown(report, demo):
    import email
    import email.policy
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from aiosmtpd.controller import Controller

    from pipeline.report.render import markdown_page
    from pipeline.report.send import SendError, send

    posts: list[bytes] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's hook name)
            posts.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    inbox = _Inbox()
    port = free_port()
    smtp = Controller(inbox, hostname="127.0.0.1", port=port)
    smtp.start()
    try:
        rcfg = config_mod.parse(
            {
                "report": {
                    "webhook_url": f"http://127.0.0.1:{http.server_address[1]}/hook",
                    "mail": {
                        "smtp_host": "127.0.0.1",
                        "smtp_port": port,
                        "recipients": {NAME: ["lead@example.com"], "cluster": ["ops@example.com"]},
                    },
                }
            }
        ).report
        assert send(report, rcfg, "en") == {"mails": 2, "posts": len(report.pages)}
    finally:
        smtp.stop()
        http.shutdown()
    assert sorted(to for to, _ in inbox.messages) == [["lead@example.com"], ["ops@example.com"]]
    raw = next(body for to, body in inbox.messages if to == ["lead@example.com"])
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    assert NAME in msg["Subject"]
    html_part = msg.get_body(("html",))
    body = html_part.get_content()
    assert "data:image" not in body and "<script" not in body
    cids = re.findall(r'src="cid:([^"]+)"', body)
    related = {p["Content-ID"].strip("<>"): p for p in msg.walk() if p.get_content_type() == "image/png"}
    assert cids and set(cids) == set(related)
    assert all(Image.open(io.BytesIO(p.get_content())).size[0] >= 600 for p in related.values())
    page = next(p for p in report.pages if p.team == NAME)
    assert json.loads(posts[report.pages.index(page)])["text"] == markdown_page(report, page, "en")
    # A server that is not there: one error naming it, no traceback.
    down = msgspec.structs.replace(rcfg, webhook_url="", mail=msgspec.structs.replace(rcfg.mail, smtp_port=1))
    with pytest.raises(SendError, match=r"mail via 127\.0\.0\.1:1 failed"):
        send(report, down, "en")
