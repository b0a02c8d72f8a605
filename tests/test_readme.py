"""The README's two set-up commands are the ones CI and users run."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sh_blocks():
    return re.findall(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)


def test_readme_has_exactly_two_setup_commands():
    blocks = sh_blocks()
    assert len(blocks) == 2
    assert "goodput demo" in blocks[0] and "pip install" in blocks[0]
    assert "pytest" in blocks[1]


# CI runs these between the README's install and pytest steps (ruff, mypy, import-linter).
STATIC_CHECKS = (
    ".venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy && .venv/bin/lint-imports"
)


def test_ci_runs_the_readme_test_command():
    ci = " ".join((ROOT / ".ci" / "run").read_text().replace("\\\n", " ").split())
    install, pytest = sh_blocks()[1].strip().split(" && ")
    assert f"{install} && {STATIC_CHECKS} && {pytest}" in ci
