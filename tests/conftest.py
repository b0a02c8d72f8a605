"""Shared test set-up. Fixtures that start real servers live in tests/fixtures/<server>.py, one module
per server, and are loaded here as plugins so that every test directory can use them."""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

pytest_plugins = sorted(
    f"tests.fixtures.{p.stem}" for p in (ROOT / "tests" / "fixtures").glob("*.py") if p.stem != "__init__"
)
