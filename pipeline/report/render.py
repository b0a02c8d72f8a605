"""The report's pages as HTML (self-contained: styles and PNG charts inline, no request leaves the file,
every string escaped) and as Markdown for chat. Both show the numbers and tables of data.Page as they
are; only the formatting and the language differ."""

from __future__ import annotations

import base64
import html
from datetime import datetime
from zoneinfo import ZoneInfo

import polars as pl

from pipeline.report import charts
from pipeline.report.data import WHY_COLUMNS, Page, Report
from pipeline.report.i18n import LABELS, label, money, number, percent

CSS = """body{font-family:"DejaVu Sans","Noto Sans CJK SC",sans-serif;margin:2em;color:#222;max-width:70em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #bbb;padding:.2em .5em}
td.n{text-align:right}th{background:#eee}img{max-width:100%;display:block;margin:.5em 0}
.kpi{display:flex;flex-wrap:wrap;gap:1em}.kpi div{border:1px solid #bbb;padding:.5em 1em}
.kpi b{display:block;font-size:1.4em}.empty{font-size:1.3em;color:#a00}"""


def _label(lang: str, key: str) -> str:
    return LABELS[lang].get(key, key)


def cell(col: str, value, lang: str, currency: str, tz: str) -> str:
    """A table cell as text, by what its column holds (the column names say the unit)."""
    if value is None:
        return "–"
    if col.endswith("_ms"):
        return datetime.fromtimestamp(value / 1000, ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M")
    if col.endswith("_pct") or col == "pct":
        return percent(value, lang)
    if col.endswith("cost"):
        return money(value, currency, lang)
    if col == "category" or col == "signal":
        return _label(lang, value)
    if isinstance(value, float):
        return number(value, lang, 2 if abs(value) < 10 else 1)
    if isinstance(value, int):
        return number(value, lang)
    return str(value)


def why(row: dict, lang: str, tz: str) -> str:
    """A top job's loss in words: "lost 72% to gang wait on pool core; gang incomplete 17:26–18:35"."""
    text = label(lang, "why_sentence").format(
        pct=f"{row['loss_pct']:.0f}", category=label(lang, row["loss_category"]), pool=str(row["pool"])
    )
    if row["evidence"]:
        z = ZoneInfo(tz)
        a, b = (
            datetime.fromtimestamp(row[k] / 1000, z).strftime("%H:%M")
            for k in ("evidence_from_ms", "evidence_to_ms")
        )
        text += f"; {row['evidence']} {a}–{b}"
    return text


def shown(name: str, frame: pl.DataFrame, lang: str, tz: str) -> pl.DataFrame:
    """The table as a page shows it: top_jobs says its why in one sentence instead of five columns."""
    if name != "top_jobs":
        return frame
    sentences = [why(r, lang, tz) for r in frame.iter_rows(named=True)]
    return frame.drop(WHY_COLUMNS).with_columns(why=pl.Series(sentences, dtype=pl.Utf8))


def numeric(frame: pl.DataFrame, col: str) -> bool:
    return frame.schema[col].is_numeric()


def recommendation(rec: dict, lang: str, currency: str) -> str:
    k = rec["kind"]
    if k == "checkpoint_interval":
        args = {
            "job_id": rec["job_id"],
            "failures": rec["failures"],
            "mtbf_h": number(rec["mtbf_s"] / 3600, lang, 2),
            "cost_s": number(rec["checkpoint_cost_s"], lang, 0),
            "rec_min": number(rec["recommended_interval_s"] / 60, lang, 0),
            "cur_min": number(rec["current_interval_s"] / 60, lang, 0),
        }
    elif k == "storage":
        args = {
            "gpu_h": number(rec["data_stall_gpu_hours"], lang),
            "money": money(rec["data_stall_cost"], currency, lang),
            "pct": percent(rec["data_stall_pct"], lang),
            "pool": rec["pool"],
            "ceil_h": number(rec["at_ceiling_gpu_hours"], lang),
        }
    elif k == "drain_node":
        args = {
            "node": rec["node"],
            "gpu": rec["gpu"],
            "jobs": rec["jobs"],
            "gpu_h": number(rec["gpu_hours"], lang),
        }
    else:
        args = {
            "job_id": rec["job_id"],
            "gpus": rec["gpus_requested"],
            "pool": rec["pool"],
            "free": rec["max_free_gpus"],
            "pool_gpus": rec["pool_gpus"],
            "wait_s": number(rec["gang_wait_s"], lang, 0),
        }
    # str.format reads only the template's own fields: braces inside a value are never interpreted.
    return label(lang, f"rec_{k}").format(**{a: str(v) for a, v in args.items()})


def title(report: Report, page: Page, lang: str) -> str:
    who = (
        label(lang, "cluster_page") + " " + report.cluster
        if page.team is None
        else label(lang, "team_page") + " " + page.team
    )
    return f"{label(lang, 'title')} · {who} · {report.day.isoformat()}"


def page_charts(report: Report, page: Page, lang: str) -> list[tuple[str, bytes]]:
    """(caption, PNG) of the page's charts; none on a day without data."""
    if report.empty:
        return []
    if page.team is None:
        return [
            (
                label(lang, "team_categories"),
                charts.stacked_categories(page.tables["team_categories"], "team", lang),
            ),
            (label(lang, "pool_hours"), charts.heat_map(page.tables["pool_hours"], lang)),
        ]
    out = [(label(lang, "waterfall"), charts.waterfall(page.tables["categories"], lang))]
    tr = page.tables["trend"]
    if tr.height:
        out.append((label(lang, "trend"), charts.trend(tr, page.numbers["target_goodput_pct"], lang)))  # type: ignore[arg-type]
    return out


def _numbers(report: Report, page: Page, lang: str) -> list[tuple[str, str]]:
    out = []
    for k, v in page.numbers.items():
        if k.endswith("_pct"):
            s = percent(v, lang)  # type: ignore[arg-type]
        elif k.endswith("cost"):
            s = money(v, report.currency, lang)  # type: ignore[arg-type]
        else:
            s = number(v, lang) if isinstance(v, int | float) else "–" if v is None else str(v)
        out.append((_label(lang, k), s))
    return out


def _coverage(report: Report, lang: str) -> list[tuple[str, str]]:
    c = report.coverage
    dead = ", ".join(f"{r}: {n}" for r, n in c["dead_letters"].items()) or "0"
    return [
        (
            label(lang, "silent_gpu_hours"),
            f"{number(c['silent_gpu_hours'], lang, 2)} / {number(c['allocated_gpu_hours'], lang, 1)}",
        ),
        (label(lang, "dead_letters"), dead),
        (label(lang, "analyzed_at"), c["analyzed_at"] or "–"),
        (label(lang, "reanalyzed_after_day"), "✓" if c["reanalyzed_after_day"] else "–"),
    ]


def html_page(
    report: Report,
    page: Page,
    lang: str,
    links: list[tuple[str, str]],
    images: list[tuple[str, bytes]] | None = None,
    cid: bool = False,
) -> str:
    """The page as one HTML document. `cid`: images as `cid:chartN` (mail) instead of data: URLs."""
    e = html.escape
    images = page_charts(report, page, lang) if images is None else images
    t = title(report, page, lang)
    out = [
        f'<!DOCTYPE html><html lang="{lang}"><head><meta charset="utf-8"><title>{e(t)}</title>',
        f"<style>{CSS}</style></head><body><h1>{e(t)}</h1>",
        f"<p>{e(label(lang, 'day'))}: {e(report.day.isoformat())} "
        f"({e(label(lang, 'timezone'))} {e(report.timezone)})</p>",
    ]
    if links:
        out.append("<p>" + " · ".join(f'<a href="{e(href)}">{e(name)}</a>' for name, href in links) + "</p>")
    if report.empty:
        out.append(f'<p class="empty">{e(label(lang, "no_data"))}</p>')
    out.append(
        '<div class="kpi">'
        + "".join(f"<div>{e(k)}<b>{e(v)}</b></div>" for k, v in _numbers(report, page, lang))
        + "</div>"
    )
    if page.team is not None:
        out.append(f"<h2>{e(label(lang, 'recommendations'))}</h2><ul>")
        out += [f"<li>{e(recommendation(r, lang, report.currency))}</li>" for r in page.recommendations] or [
            f"<li>{e(label(lang, 'none'))}</li>"
        ]
        out.append("</ul>")
    for i, (caption, png) in enumerate(images):
        src = f"cid:chart{i}" if cid else "data:image/png;base64," + base64.b64encode(png).decode()
        out.append(f'<h2>{e(caption)}</h2><img class="chart" alt="{e(caption)}" src="{src}">')
    for name, table in page.tables.items():
        frame = shown(name, table, lang, report.timezone)
        out.append(f"<h2>{e(_label(lang, name))}</h2>")
        if not frame.height:
            out.append(f"<p>{e(label(lang, 'none'))}</p>")
            continue
        out.append("<table><tr>" + "".join(f"<th>{e(_label(lang, c))}</th>" for c in frame.columns) + "</tr>")
        for row in frame.iter_rows():
            out.append(
                "<tr>"
                + "".join(
                    f'<td class="n">{e(cell(c, v, lang, report.currency, report.timezone))}</td>'
                    if numeric(frame, c)
                    else f"<td>{e(cell(c, v, lang, report.currency, report.timezone))}</td>"
                    for c, v in zip(frame.columns, row, strict=True)
                )
                + "</tr>"
            )
        out.append("</table>")
    out.append(f"<h2>{e(label(lang, 'coverage'))}</h2><ul>")
    out += [f"<li>{e(k)}: {e(v)}</li>" for k, v in _coverage(report, lang)]
    out.append("</ul></body></html>")
    return "\n".join(out)


def _md(text: str) -> str:
    """Markdown-safe: table pipes and the characters chat clients read as markup are escaped."""
    for ch in "\\|*_`<>[]#":
        text = text.replace(ch, "\\" + ch)
    return text


def markdown_page(report: Report, page: Page, lang: str) -> str:
    """The page for chat: headline numbers, recommendations and the short tables (at most 10 rows each)."""
    out = [f"# {_md(title(report, page, lang))}", ""]
    if report.empty:
        out += [_md(label(lang, "no_data")), ""]
    out += [f"- {_md(k)}: {_md(v)}" for k, v in _numbers(report, page, lang)]
    if page.team is not None:
        out += ["", f"## {_md(label(lang, 'recommendations'))}", ""]
        out += [f"- {_md(recommendation(r, lang, report.currency))}" for r in page.recommendations] or [
            f"- {_md(label(lang, 'none'))}"
        ]
    for name, table in page.tables.items():
        frame = shown(name, table, lang, report.timezone)
        if not frame.height:
            continue
        out += ["", f"## {_md(_label(lang, name))}", ""]
        out.append("| " + " | ".join(_md(_label(lang, c)) for c in frame.columns) + " |")
        out.append("|" + "|".join("---:" if numeric(frame, c) else "---" for c in frame.columns) + "|")
        for row in frame.head(10).iter_rows():
            out.append(
                "| "
                + " | ".join(
                    _md(cell(c, v, lang, report.currency, report.timezone))
                    for c, v in zip(frame.columns, row, strict=True)
                )
                + " |"
            )
    out += ["", f"## {_md(label(lang, 'coverage'))}", ""]
    out += [f"- {_md(k)}: {_md(v)}" for k, v in _coverage(report, lang)]
    return "\n".join(out) + "\n"
