"""The columnar envelope (message schema version 2) means exactly what the JSON one means: the simulated
cluster's batches of every kind, sent either way or both ways mixed in one load, give the same tables,
and a bad columnar batch among good ones of either version is refused alone."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import replace

import pyarrow as pa
import pytest

from contracts import columnar
from contracts import config as config_mod
from contracts.envelope import encode_batch
from contracts.schema import SCHEMA_VERSION
from goodput.sim.cluster import SimConfig, scaled_config, simulate
from goodput.sim.emit import messages
from pipeline.loader import _expected_kind, limits_from_config
from pipeline.validate import Envelope, Limits, decode, to_tables
from tests.loader.corpus_columnar import message as columnar_case

COLUMNAR = 2


@pytest.fixture(scope="module")
def sim():
    cfg = scaled_config(config_mod.load(), 16)
    start_ms = (int(time.time()) // 60) * 60_000 - 1_800_000
    res = simulate(SimConfig.from_config(cfg, hours=0.25, seed=3, start_ms=start_ms), cfg)
    return cfg, {v: list(messages(res, version=v)) for v in (SCHEMA_VERSION, COLUMNAR)}


def _load(cfg, msgs) -> tuple[dict[str, pa.Table], list]:
    limits = limits_from_config(cfg)
    envs = [decode(value, limits, _expected_kind(topic, "goodput")) for topic, _key, value in msgs]
    assert all(isinstance(e, Envelope) for e in envs), [e for e in envs if not isinstance(e, Envelope)][:3]
    return to_tables(envs, int(time.time() * 1000), limits)


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by(
        [(c, "ascending") for c in t.column_names if not pa.types.is_list(t.schema.field(c).type)]
    )


def test_the_simulated_cluster_gives_the_same_tables_in_both_versions(sim):
    cfg, by_version = sim
    assert by_version[COLUMNAR][0][2][:4] == b"GPC2" and by_version[SCHEMA_VERSION][0][2][:1] == b"{"
    json_tables, json_rejected = _load(cfg, by_version[SCHEMA_VERSION])
    col_tables, col_rejected = _load(cfg, by_version[COLUMNAR])
    assert not json_rejected and not col_rejected
    assert set(col_tables) == set(json_tables) == {"gpu", "nic", "storage", "job"}
    for kind, table in json_tables.items():
        assert table.num_rows > 0
        assert col_tables[kind].schema.equals(table.schema), kind
        assert col_tables[kind].equals(table), f"{kind}: the versions' tables differ"
        assert table.column("power_w" if kind == "gpu" else "ts").null_count < table.num_rows


def test_both_versions_mixed_in_one_load_give_the_same_rows(sim):
    cfg, by_version = sim
    mixed = [
        pair[i % 2]
        for i, pair in enumerate(zip(by_version[SCHEMA_VERSION], by_version[COLUMNAR], strict=True))
    ]
    tables, rejected = _load(cfg, mixed)
    want, _ = _load(cfg, by_version[SCHEMA_VERSION])
    assert not rejected
    for kind, table in want.items():
        assert _sorted(tables[kind]).equals(_sorted(table)), kind


def test_a_bad_columnar_batch_among_good_ones_of_both_versions_is_refused_alone(sim):
    cfg, by_version = sim
    limits = replace(limits_from_config(cfg), cluster=None, known_nodes=None)  # the corpus's sender too
    now = int(time.time() * 1000)
    gpu = [m for v in (SCHEMA_VERSION, COLUMNAR) for m in by_version[v] if m[0].endswith(".gpu")][:6]
    bad = decode(columnar_case("columnar-value-out-of-range", now - 60_000), limits, "gpu")
    assert isinstance(bad, Envelope)  # its structure is sound: the value is what is wrong
    envs = [decode(value, limits, "gpu") for _topic, _key, value in gpu]
    tables, rejected = to_tables([*envs[:3], bad, *envs[3:]], now, limits)
    assert [(e is bad, r.reason) for e, r in rejected] == [(True, "out_of_range")]
    assert "power_w" in rejected[0][1].detail
    assert tables["gpu"].num_rows == sum(e.rows for e in envs)


def test_no_mutation_of_a_columnar_message_makes_the_loader_raise():
    """4,000 seeded mutations (bytes changed, cut out or inserted, mostly in the buffers): each message is
    an envelope or a refusal with a reason, and converting an envelope refuses or accepts it; nothing
    raises, so no bad batch can stop the loader."""
    now = int(time.time() * 1000)
    limits = Limits(max_past_ms=10**13, max_future_ms=10**13)
    columns = {
        "gpu": {
            "ts_ms": [now] * 3,
            "gpu": [0, 1, 2],
            "uuid": ["a", "b", "a"],
            "power_w": [1.0, None, 3.0],
            "lost": [False, True, None],
            "job_id": [None, None, "j"],
        },
        "job": {
            "ts_ms": [now] * 2,
            "job_id": ["j", "k"],
            "event": ["allocated", "released"],
            "node": ["n", "n"],
            "gpu_indices": [[0, 1], None],
        },
    }
    base = [
        encode_batch(
            kind=k, cluster="c", node="n", seq=1, sent_ms=now, agent="t", version=COLUMNAR, columns=c
        )
        for k, c in columns.items()
    ]
    rng = random.Random(5)
    outcomes: Counter = Counter()
    for _ in range(4000):
        message = bytearray(rng.choice(base))
        body = columnar.padded(columnar.header_end(bytes(message)))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(min(body if rng.random() < 0.9 else 0, len(message) - 1), len(message))
            roll = rng.random()
            if roll < 0.6:
                message[at] = rng.randrange(256)
            elif roll < 0.8:
                del message[at : at + rng.randint(1, 8)]
            else:
                message[at:at] = rng.randbytes(rng.randint(1, 8))
        env = decode(bytes(message), limits, None)
        if isinstance(env, Envelope):
            _, rejected = to_tables([env], now, limits)
            outcomes["refused when converted" if rejected else "accepted"] += 1
        else:
            outcomes[env.reason] += 1
    assert outcomes["bad_buffers"] > 1000 and outcomes["accepted"] > 100, outcomes
