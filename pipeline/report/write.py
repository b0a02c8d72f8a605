"""Writes a report: per page an HTML file and a Markdown file, every table shown as CSV and Parquet,
and report.json with every number (REPORT_VERSION, docs/report.md)."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, date, datetime
from pathlib import Path

import polars as pl

from pipeline.report.data import Page, Report
from pipeline.report.render import html_page, markdown_page

REPORT_VERSION = 1
"""Version of report.json (docs/report.md): raised when a key is removed or changes meaning."""


def slug(page: Page) -> str:
    """A file name for the page: the team's name where it is plain, else its plain part and a short hash,
    so `<script>` or a Chinese name still makes a unique, portable file name."""
    if page.team is None:
        return "cluster"
    plain = re.sub(r"[^A-Za-z0-9_.-]", "_", page.team)
    if plain == page.team:
        return f"team-{plain}"
    return f"team-{plain.strip('_') or 'x'}-{hashlib.sha256(page.team.encode()).hexdigest()[:8]}"


def _jsonable(frame: pl.DataFrame) -> list[dict]:
    return [{k: v.isoformat() if isinstance(v, date) else v for k, v in r.items()} for r in frame.to_dicts()]


def as_json(report: Report) -> dict:
    return {
        "version": REPORT_VERSION,
        "cluster": report.cluster,
        "currency": report.currency,
        "day": report.day.isoformat(),
        "timezone": report.timezone,
        "start": datetime.fromtimestamp(report.start_ms / 1000, UTC).isoformat().replace("+00:00", "Z"),
        "end": datetime.fromtimestamp(report.end_ms / 1000, UTC).isoformat().replace("+00:00", "Z"),
        "empty": report.empty,
        "coverage": report.coverage,
        "pages": [
            {
                "team": p.team,
                "file": slug(p),
                "numbers": p.numbers,
                "recommendations": p.recommendations,
                "tables": {name: _jsonable(f) for name, f in p.tables.items()},
            }
            for p in report.pages
        ],
    }


def write(report: Report, out: Path, lang: str) -> list[Path]:
    """Writes every file of the report under `out`; returns the HTML pages (cluster first)."""
    out.mkdir(parents=True, exist_ok=True)
    links = [(p.team if p.team is not None else report.cluster, f"{slug(p)}.html") for p in report.pages]
    pages = []
    for p in report.pages:
        name = slug(p)
        path = out / f"{name}.html"
        path.write_text(html_page(report, p, lang, links), encoding="utf-8")
        (out / f"{name}.md").write_text(markdown_page(report, p, lang), encoding="utf-8")
        tables = out / "tables" / name
        tables.mkdir(parents=True, exist_ok=True)
        for t, frame in p.tables.items():
            frame.write_csv(tables / f"{t}.csv")
            frame.write_parquet(tables / f"{t}.parquet")
        pages.append(path)
    (out / "report.json").write_text(
        json.dumps(as_json(report), indent=2, ensure_ascii=False), encoding="utf-8"
    )
    return pages
