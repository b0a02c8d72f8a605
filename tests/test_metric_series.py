"""The daemons' metrics classes spell the catalog: one field per series, of the series' type, so code that
names a metric by attribute cannot drift from what dashboards and alerts read (contracts/catalog.py)."""

from typing import get_type_hints

import pytest
from prometheus_client import CollectorRegistry

from agents.metrics import AgentSelfSeries
from contracts.catalog import AGENT_SELF_METRICS, LOADER_METRICS
from contracts.exporter import TYPES, attribute, declare
from pipeline.loader_service import LoaderSeries


@pytest.mark.parametrize("cls, spec", [(AgentSelfSeries, AGENT_SELF_METRICS), (LoaderSeries, LOADER_METRICS)])
def test_fields_are_the_catalog_entries_with_their_types(cls, spec):
    assert get_type_hints(cls) == {attribute(name): TYPES[mtype] for name, (mtype, _, _) in spec.items()}


def test_declare_refuses_a_class_that_differs_from_the_catalog():
    spec = dict(AGENT_SELF_METRICS, goodput_agent_uncatalogued_total=("counter", "not a field", ()))
    with pytest.raises(TypeError, match="agent_uncatalogued"):
        declare(AgentSelfSeries, spec, CollectorRegistry())


def test_declared_series_are_exposed_under_the_catalog_names():
    registry = CollectorRegistry()
    series = declare(AgentSelfSeries, AGENT_SELF_METRICS, registry)
    series.agent_batches_sent.labels("gpu").inc()
    assert registry.get_sample_value("goodput_agent_batches_sent_total", {"kind": "gpu"}) == 1


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"metric": "goodput_x_bytes", "metric_type": "counter", "counts": "rate"}, "must end in _total"),
        ({"metric": "goodput_x_bytes_total", "metric_type": "gauge"}, "must end in _total"),
        ({"metric": "goodput_x_bytes_total", "metric_type": "counter"}, "says how it counts"),
        ({"metric": "goodput_x_bytes", "metric_type": "gauge", "counts": "rate"}, "says how it counts"),
    ],
)
def test_a_sample_field_declares_a_counter_consistently(kw, words):
    """A counter's series ends in `_total` and says how the agent keeps its total (schema.Field.counts);
    a gauge does neither, so a rename cannot leave a gauge named like a counter."""
    from contracts.schema import Field

    with pytest.raises(ValueError, match=words):
        Field("x", "float", "bytes/s", "x", **kw)
