"""The loader service against the real broker: good batches of every kind mixed with ~45 kinds of
malformed ones, in the same topics and partitions. Every good row lands once, every bad message is a
dead letter with its reason, /metrics says so, and the service keeps consuming afterwards.

One service run (module fixture) serves every test here: two cores are shared with the broker."""

from __future__ import annotations

import json
import time

import pytest

from contracts import catalog
from pipeline import ddl
from pipeline.chdb_store import ChdbStore
from tests.loader.helpers import (
    CLUSTER,
    MAX_BATCH_ROWS,
    NODES,
    SCHEDULER,
    Producer,
    ServiceThread,
    batch,
    columns,
    free_port,
    good_stream,
    ledger_keys,
    metric_sum,
    new_topics,
    raw_counts,
    scrape,
    write_config,
)

pytestmark = pytest.mark.kafka
NODE = NODES[5]  # malformed batches come from a node of their own, so good seqs never collide with them


def _doc(kind="gpu", seq=1000, node=NODE, **over) -> dict:
    doc = {
        "schema_version": 1,
        "kind": kind,
        "cluster": CLUSTER,
        "node": node,
        "seq": seq,
        "sent_ms": int(time.time() * 1000),
        "agent": "t",
        "columns": columns(kind, 2, 0),
    }
    doc.update(over)
    return doc


def _raw(**over) -> bytes:
    return json.dumps(_doc(**over)).encode()


def _cols(seq: int, kind: str = "gpu", **cols) -> bytes:
    """A batch whose columns differ from a valid one in `cols`; job batches come from the scheduler."""
    sender = SCHEDULER if kind == "job" else NODE
    return _raw(kind=kind, seq=seq, node=sender, columns={**columns(kind, 2, 0), **cols})


def _without(name: str, seq: int) -> bytes:
    cols = columns("gpu", 2, 0)
    del cols[name]
    return _raw(seq=seq, columns=cols)


def _envelope_without(name: str) -> bytes:
    doc = _doc(seq=1001)
    del doc[name]
    return json.dumps(doc).encode()


def malformed() -> list[tuple[str, str, str, bytes]]:
    """(case, topic kind, expected dead-letter reason, message value); every value distinct."""
    now = int(time.time() * 1000)
    day = 86_400_000
    return [
        ("not JSON", "gpu", "not_json", b"{not json"),
        ("empty message", "gpu", "not_json", b""),
        ("invalid UTF-8", "gpu", "not_json", _raw(seq=1002).replace(b'"agent": "t"', b'"agent": "\xff\xfe"')),
        ("JSON array", "gpu", "bad_envelope", b"[1, 2, 3]"),
        ("JSON string", "gpu", "bad_envelope", b'"a batch"'),
        ("unknown schema_version", "gpu", "unknown_version", _raw(seq=1003, schema_version=2)),
        ("missing envelope field", "gpu", "bad_envelope", _envelope_without("seq")),
        (
            "envelope field of the wrong type",
            "gpu",
            "bad_envelope",
            _raw(seq=1004).replace(b'"seq": 1004', b'"seq": "1004"'),
        ),
        ("negative seq", "gpu", "bad_envelope", _raw(seq=-1)),
        ("empty node name", "gpu", "bad_envelope", _raw(seq=1005, node="")),
        ("columns not an object", "gpu", "bad_envelope", _raw(seq=1006, columns=[1, 2])),
        ("column not an array", "gpu", "bad_envelope", _cols(1007, power_w=400.0)),
        ("wrong kind for the topic", "gpu", "kind_mismatch", _raw(kind="nic", seq=1008, node=NODE)),
        ("unknown kind", "gpu", "unknown_kind", _raw(seq=1009).replace(b'"kind": "gpu"', b'"kind": "fan"')),
        ("unknown cluster", "gpu", "unknown_cluster", _raw(seq=1010, cluster="elsewhere")),
        ("unknown node", "gpu", "unknown_node", _raw(seq=1011, node="stranger-01")),
        ("unknown field", "gpu", "unknown_field", _cols(1012, fan_rpm=[1, 2])),
        ("string where a float belongs", "gpu", "bad_type", _cols(1013, power_w=["hot", "cold"])),
        ("columns of different lengths", "gpu", "ragged_columns", _cols(1014, power_w=[1.0, 2.0, 3.0])),
        (
            "NaN literal",
            "gpu",
            "non_finite",
            _cols(1015, power_w=[1.0, 2.0]).replace(b"[1.0, 2.0]", b"[NaN, 2.0]"),
        ),
        ("NaN as a string", "gpu", "bad_type", _cols(1016, power_w=["NaN", 1.0])),
        (
            "Infinity literal",
            "gpu",
            "non_finite",
            _cols(1017, power_w=[1.0, 2.0]).replace(b"[1.0, 2.0]", b"[Infinity, 2.0]"),
        ),
        (
            "number beyond the double range",
            "gpu",
            "non_finite",
            _cols(1018, power_w=[1.0, 2.0]).replace(b"[1.0, 2.0]", b"[1e999, 2.0]"),
        ),
        ("number beyond Float32", "gpu", "out_of_range", _cols(1019, pcie_tx_bytes_per_s=[1e39, 1.0])),
        ("negative rate", "gpu", "out_of_range", _cols(1020, pcie_tx_bytes_per_s=[-1.0, 1.0])),
        ("percentage above 100", "gpu", "out_of_range", _cols(1021, util_gpu_pct=[101.0, 1.0])),
        ("timestamp far in the future", "gpu", "out_of_range", _cols(1022, ts_ms=[now + day, now])),
        ("timestamp far in the past", "gpu", "out_of_range", _cols(1023, ts_ms=[now - 40 * day, now])),
        ("sent_ms far in the past", "gpu", "out_of_range", _raw(seq=1024, sent_ms=now - 40 * day)),
        (
            "oversize batch",
            "gpu",
            "oversize_batch",
            _raw(seq=1025, columns=columns("gpu", MAX_BATCH_ROWS + 1, 0)),
        ),
        ("empty columns object", "gpu", "empty_batch", _raw(seq=1026, columns={})),
        (
            "columns of zero rows",
            "gpu",
            "empty_batch",
            _raw(seq=1027, columns={"ts_ms": [], "gpu": [], "uuid": []}),
        ),
        ("null in a required field", "gpu", "missing_field", _cols(1028, uuid=["GPU-0", None])),
        ("required field absent", "gpu", "missing_field", _without("uuid", 1029)),
        ("bool where an int belongs", "gpu", "bad_type", _cols(1030, gpu=[True, 1])),
        ("bool where a float belongs", "gpu", "bad_type", _cols(1031, power_w=[True, 1.0])),
        ("fraction where an int belongs", "gpu", "bad_type", _cols(1032, gpu=[1.5, 2])),
        ("int beyond Int64", "gpu", "bad_type", _cols(1033, mem_used_bytes=[2**63, 1])),
        ("string where an int belongs", "gpu", "bad_type", _cols(1034, gpu=["0", "1"])),
        ("number where a string belongs", "gpu", "bad_type", _cols(1035, uuid=[123, 456])),
        ("string too long", "gpu", "out_of_range", _cols(1036, uuid=["G" * 5000, "GPU-1"])),
        ("nested object as a value", "gpu", "bad_type", _cols(1037, power_w=[{"w": 1}, 2.0])),
        ("gpu index out of range", "gpu", "out_of_range", _cols(1038, gpu=[64, 1])),
        ("bool where a bool is a string", "gpu", "bad_type", _cols(1039, lost=["false", "true"])),
        (
            "unknown enum value",
            "job",
            "out_of_range",
            _cols(1040, kind="job", event=["exploded", "allocated"]),
        ),
        ("null inside an int list", "job", "bad_type", _cols(1041, kind="job", gpu_indices=[[0, None], [1]])),
        (
            "nested list inside an int list",
            "job",
            "bad_type",
            _cols(1042, kind="job", gpu_indices=[[0, [1]], [1]]),
        ),
        (
            "int list value beyond Int32",
            "job",
            "bad_type",
            _cols(1043, kind="job", gpu_indices=[[2**40], [1]]),
        ),
        ("negative step", "step", "out_of_range", _cols(1044, kind="step", step=[-1, 1])),
    ]


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
    bad_sends = [(kind, NODE, value) for _case, kind, _reason, value in bad]
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


def test_at_least_25_distinct_malformed_kinds_were_sent(run):
    assert len({case for case, *_ in run["bad"]}) >= 25
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
    later_nodes_seqs = {(node, kind, json.loads(v)["seq"]) for kind, node, v, _ in run["later"]}
    assert later_nodes_seqs <= set(ledger_keys(run["store"]))
    assert not run["service"].loader.totals.redelivered
