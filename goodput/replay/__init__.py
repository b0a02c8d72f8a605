"""Replays of real, public cluster traces through the pipeline (docs/real-traces.md): each importer turns a
trace into the documented messages, which go through the same transport, loader and analyzers as live data."""

REPLAY_VERSION = 1
"""Version of the replays' JSON objects (docs/real-traces.md): fields may be added, never removed,
renamed or re-typed within one version."""
