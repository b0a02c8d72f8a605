"""The daily efficiency report (`goodput report`, docs/report.md): per team and one cluster page, built
from the analyzer output tables (build.py, with data.py, team.py and cluster.py), written as HTML,
Markdown, CSV, Parquet and a versioned JSON (write.py), in English or Chinese (i18n.py)."""
