"""The report's charts as PNG bytes (matplotlib, no display): stacked category bars, the goodput trend,
a pool x hour heat map and a waste waterfall. PNG, because mail clients drop SVG and `data:` images
alike and the same bytes go inline in the HTML and as CID parts of a mail.

Colours: Okabe & Ito's palette, told apart with every common colour-vision deficiency; the heat map uses
cividis, designed for the same. Text falls back to Noto Sans CJK for Chinese labels and team names.
"""

from __future__ import annotations

import io
import logging

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import polars as pl  # noqa: E402

from contracts import catalog  # noqa: E402
from pipeline.report.i18n import label  # noqa: E402

OKABE_ITO = ("#009E73", "#E69F00", "#56B4E9", "#CC79A7", "#D55E00", "#F0E442", "#0072B2", "#999999")
COLOURS = dict(zip(catalog.CATEGORIES, OKABE_ITO, strict=True))
FONTS = ["DejaVu Sans", "Noto Sans CJK SC", "Noto Sans CJK JP"]
logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)  # a missing fallback font is no error
plt.rcParams.update(
    {
        "font.family": FONTS,
        "figure.dpi": 100,
        "savefig.dpi": 100,
        "axes.spines.top": False,
        "axes.spines.right": False,
    }
)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def stacked_categories(frame: pl.DataFrame, by: str, lang: str) -> bytes:
    """One horizontal bar per `by` value, stacked by category; `frame`: by, category, gpu_hours."""
    names = sorted(frame[by].unique().to_list())
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(names) + 1.6))
    left = [0.0] * len(names)
    for c in catalog.CATEGORIES:
        vals = []
        for n in names:
            r = frame.filter((pl.col(by) == n) & (pl.col("category") == c))
            vals.append(float(r["gpu_hours"].sum()) if r.height else 0.0)
        ax.barh(names, vals, left=left, color=COLOURS[c], label=label(lang, c))
        left = [a + v for a, v in zip(left, vals, strict=True)]
    ax.set_xlabel(label(lang, "gpu_hours_unit"))
    ax.invert_yaxis()
    ax.legend(
        ncol=4, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(names) < 3 else -0.12)
    )
    return _png(fig)


def trend(frame: pl.DataFrame, target: float | None, lang: str) -> bytes:
    """Goodput % per day (`day`, `goodput_pct`), with the target as a dashed line."""
    fig, ax = plt.subplots(figsize=(8, 3))
    days = [d.isoformat()[5:] for d in frame["day"].to_list()]
    ax.plot(
        days, frame["goodput_pct"].to_list(), marker="o", color=OKABE_ITO[6], label=label(lang, "goodput_pct")
    )
    if target is not None:
        ax.axhline(target, color=OKABE_ITO[4], linestyle="--", label=label(lang, "target_goodput_pct"))
    ax.set_ylim(0, 100)
    ax.set_ylabel("%")
    ax.legend(fontsize=8)
    return _png(fig)


def heat_map(frame: pl.DataFrame, lang: str) -> bytes:
    """Allocated % of capacity per pool (rows) and local hour (columns)."""
    pools = sorted(frame["pool"].unique().to_list())
    grid = [[float("nan")] * 24 for _ in pools]
    for r in frame.iter_rows(named=True):
        grid[pools.index(r["pool"])][r["hour"]] = r["allocated_pct"]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(pools) + 1.4))
    im = ax.imshow(grid, aspect="auto", cmap="cividis", vmin=0, vmax=100)
    ax.set_yticks(range(len(pools)), pools)
    ax.set_xticks(range(0, 24, 2))
    ax.set_xlabel(label(lang, "hour"))
    fig.colorbar(im, ax=ax, label="%")
    return _png(fig)


def waterfall(categories: pl.DataFrame, lang: str) -> bytes:
    """Allocated GPU-hours stepping down by each waste category to the productive hours."""
    total = float(categories["gpu_hours"].sum())
    fig, ax = plt.subplots(figsize=(8, 3.2))
    names, bottoms, heights, colours = [label(lang, "allocated_gpu_hours")], [0.0], [total], ["#444444"]
    level = total
    for c in catalog.WASTE_CATEGORIES:
        h = float(categories.filter(pl.col("category") == c)["gpu_hours"].sum())
        level -= h
        names.append(label(lang, c))
        bottoms.append(level)
        heights.append(h)
        colours.append(COLOURS[c])
    names.append(label(lang, "productive"))
    bottoms.append(0.0)
    heights.append(level)
    colours.append(COLOURS["productive"])
    ax.bar(names, heights, bottom=bottoms, color=colours)
    ax.set_ylabel(label(lang, "gpu_hours_unit"))
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    return _png(fig)
