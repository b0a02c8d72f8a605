"""The loader service against the real broker: good batches of every kind mixed with the bad-input
corpus (tests/loader/corpus.py), in the same topics and partitions. Every good row lands once, every
bad message is a dead letter with its reason, /metrics says so, and the service keeps consuming.

One service run (module fixture) serves every test here: two cores are shared with the broker."""

from __future__ import annotations

import time

import pytest

from contracts import catalog
from pipeline import ddl
from pipeline.chdb_store import ChdbStore
from tests.fixtures.ports import free_port
from tests.loader.corpus import CASES, message
from tests.loader.helpers import (
    NODES,
    Producer,
    ServiceThread,
    batch,
    good_stream,
    ledger_keys,
    metric_sum,
    new_topics,
    raw_counts,
    scrape,
    write_config,
)
from tests.messages import envelope_dict

pytestmark = pytest.mark.kafka


def malformed() -> list[tuple[str, str, str, bytes]]:
    """(case, topic kind, expected dead-letter reason, message value): the bad-input corpus."""
    now = int(time.time() * 1000) - 60_000
    return [(c["what"], c["topic"], c["reason"], message(c["name"], now)) for c in CASES]


@pytest.fixture(scope="module")
def run(kafka_broker, tmp_path_factory):
    """Sends good and bad batches interleaved, lets the service load them, scrapes /metrics once it has
    caught up, then sends more good batches and waits for those too."""
    tmp = tmp_path_factory.mktemp("input")
    prefix = new_topics(kafka_broker.bootstrap, partitions=2)
    port = free_port()
    config = write_config(
        tmp / "goodput.toml",
        kafka_broker.bootstrap,
        prefix,
        tmp / "store",
        metrics_address=f"127.0.0.1:{port}",
        flush_records=40,
    )
    first, later = good_stream(range(0, 6)), good_stream(range(6, 9))
    bad = malformed()
    duplicate = (
        "duplicate seq",
        "gpu",
        "duplicate_seq",
        batch("gpu", NODES[0], 3, rows=3),
    )  # seq 3 is good above
    producer = Producer(kafka_broker.bootstrap, prefix)
    good_sends = [(kind, node, value) for kind, node, value, _rows in first]
    bad_sends = [(kind, "gpu-006", value) for _case, kind, _reason, value in bad]
    # interleaved, so every poll holds both; the longer list's tail is sent below
    for pair in zip(good_sends, bad_sends, strict=False):
        producer.send_all(pair)
    producer.send_all(
        good_sends[len(bad_sends) :] + bad_sends[len(good_sends) :] + [("gpu", NODES[0], duplicate[3])]
    )
    bad.append(duplicate)

    store = ChdbStore(tmp / "store")
    ddl.migrate(store)
    svc = ServiceThread(config, store).start()
    sent = len(first) + len(bad)
    svc.wait_for(lambda: svc.service.loader.totals.records >= sent)
    svc.wait_for(
        lambda: (
            metric_sum(scrape(port), "goodput_loader_consumer_lag_records") == 0
            and metric_sum(scrape(port), "goodput_loader_assigned_partitions") == 10
        )
    )
    caught_up = scrape(port)
    producer.send_all(later)
    producer.close()
    svc.wait_for(lambda: svc.service.loader.totals.records >= sent + len(later))
    svc.stop_and_join()
    yield {
        "store": store,
        "good": first + later,
        "later": later,
        "bad": bad,
        "metrics": caught_up,
        "service": svc.service,
    }
    store.close()


def test_at_least_40_distinct_malformed_kinds_were_sent(run):
    assert len({case for case, *_ in run["bad"]}) >= 40
    assert len({value for *_, value in run["bad"]}) == len(run["bad"])


def test_every_good_row_lands_exactly_once(run):
    want = {}
    for kind, _node, _value, rows in run["good"]:
        want[kind] = want.get(kind, 0) + rows
    store = run["store"]
    assert dict(raw_counts(store)) == want
    assert dict(raw_counts(store, final=False)) == want, "without a crash, not even a transient duplicate"
    keys = ledger_keys(store)
    assert len(keys) == len(set(keys)) == len(run["good"])


def test_every_bad_message_is_a_dead_letter_with_its_reason(run, reliability):
    t = run["store"].query_arrow("SELECT reason, hex(raw) AS raw, detail, source FROM dead_letters")
    got = dict(
        zip(
            (bytes.fromhex(h) for h in t.column("raw").to_pylist()),
            t.column("reason").to_pylist(),
            strict=True,
        )
    )
    wrong = {
        case: (reason, got.get(value)) for case, _k, reason, value in run["bad"] if got.get(value) != reason
    }
    assert not wrong, f"case: (expected, got) {wrong}"
    assert len(t) == len(run["bad"])
    assert all(t.column("detail").to_pylist()), "every dead letter says why"
    assert all(s.startswith("lt") for s in t.column("source").to_pylist())
    for case, _kind, reason, _value in run["bad"]:
        reliability.bad_input(case, reason, dead_lettered=1, stored=0)


def test_metrics_name_every_catalog_series_and_count_by_reason(run):
    m = run["metrics"]
    for name, (typ, _help, _labels) in catalog.LOADER_METRICS.items():
        family = name.removesuffix("_total") if typ == "counter" else name
        assert family in m.families, f"{name} is declared in catalog.LOADER_METRICS but not exported"
    undeclared = {f for f in m.families if not f.endswith("_created")} - {
        n.removesuffix("_total") for n in catalog.LOADER_METRICS
    }  # _created: prometheus_client's own
    assert not undeclared, f"exported but not declared in catalog.LOADER_METRICS: {undeclared}"
    reasons = {}
    for _case, _kind, reason, _value in run["bad"]:
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, n in reasons.items():
        assert metric_sum(m, "goodput_loader_dead_letters_total", reason=reason) == n, reason
    first_rows = sum(rows for *_, rows in run["good"]) - sum(rows for *_, rows in run["later"])
    assert metric_sum(m, "goodput_loader_rows_loaded_total") == first_rows
    assert metric_sum(m, "goodput_loader_consumer_lag_records") == 0
    assert metric_sum(m, "goodput_loader_batches_committed_total") >= 1
    assert m["goodput_loader_last_commit_timestamp_seconds"][()] > time.time() - 120


def test_still_consuming_after_bad_input(run):
    later_nodes_seqs = {(node, kind, envelope_dict(v)["seq"]) for kind, node, v, _ in run["later"]}
    assert later_nodes_seqs <= set(ledger_keys(run["store"]))
    assert not run["service"].loader.totals.redelivered
