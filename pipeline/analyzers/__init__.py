"""Analyzers: ClickHouse SQL that turns raw samples and job events into goodput categories and costs.

SQL, not Python, so that they run where the data is (chDB in a directory, or a ClickHouse server)."""
