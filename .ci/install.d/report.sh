#!/usr/bin/env bash
# Installs what the report's browser tests need (docs/report.md): Debian's headless Chromium, which
# renders the HTML report to a screenshot, and Noto CJK, so `--lang zh` and Chinese team names draw real
# glyphs in the browser and in the matplotlib charts. Nothing is started. Idempotent; runs as root.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && fc-list :lang=zh family | grep -q "Noto Sans CJK"; then
  echo "report: chromium and Noto CJK present ($(chromium --version 2>/dev/null | head -1))"
  exit 0
fi
"$(dirname "$0")/../apt-install" report chromium fonts-noto-cjk fonts-dejavu-core fontconfig
echo "report: installed chromium $(dpkg-query -W -f='${Version}' chromium), fonts-noto-cjk"
