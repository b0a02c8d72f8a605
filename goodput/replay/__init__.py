"""Replays of real, public cluster traces through the pipeline (docs/real-traces.md): each importer turns a
trace into the documented messages, which go through the same transport, loader and analyzers as live data."""
