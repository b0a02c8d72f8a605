"""Fixtures for the collector tests: fixture node trees and golden-output comparison."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from collectors.rows import check_row
from tests.collectors.trees import write_node

GOLDEN = Path(__file__).parent / "golden"
T0 = 1_700_000_000_000


@pytest.fixture
def node(tmp_path: Path):
    """A fixture node at tick 0; call the returned function with 1 to advance it to tick 1."""

    def at(tick: int) -> Path:
        write_node(tmp_path, tick)
        return tmp_path

    at(0)
    return at


def assert_valid(kind: str, rows: list[dict]) -> None:
    problems = [(r, check_row(kind, r)) for r in rows if check_row(kind, r) is not None]
    assert not problems, problems


def assert_golden(name: str, rows: list[dict]) -> None:
    """Compare with tests/collectors/golden/<name>.json; GOODPUT_UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / f"{name}.json"
    text = json.dumps(rows, indent=1, sort_keys=True) + "\n"
    if os.environ.get("GOODPUT_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with GOODPUT_UPDATE_GOLDEN=1 to create it, then review it"
    assert json.loads(path.read_text()) == json.loads(text), (
        f"rows differ from {path} (GOODPUT_UPDATE_GOLDEN=1 to accept)"
    )
