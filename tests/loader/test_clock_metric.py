"""goodput_loader_node_clock_offset_seconds: per node, the largest sent - appended of the last 10 minutes."""

from prometheus_client import generate_latest

from pipeline.loader_service import CLOCK_WINDOW_S, LoaderMetrics


def _series(m: LoaderMetrics) -> dict[str, float]:
    out = {}
    for line in generate_latest(m.registry).decode().splitlines():
        if line.startswith("goodput_loader_node_clock_offset_seconds{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('node="')[1].split('"')[0]] = float(value)
    return out


def test_the_gauge_keeps_the_largest_offset_of_the_window_and_drops_silent_nodes():
    m = LoaderMetrics()
    try:
        m.clock_offsets({"a": 29_950, "b": 10}, now_s=1000.0)
        m.clock_offsets({"a": 29_400}, now_s=1100.0)  # a slower batch: the envelope stays
        assert _series(m) == {"a": 29.95, "b": 0.01}
        m.clock_offsets({"a": 28_000}, now_s=1000.0 + CLOCK_WINDOW_S + 1)  # the first load left the window
        assert _series(m) == {"a": 29.4}  # b sent nothing for the window: its series is gone
    finally:
        m.close()
