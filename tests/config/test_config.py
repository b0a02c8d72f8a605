"""The one config model (contracts/config.py): typos refused by their full key path with a suggestion,
values bounded, every table checked whether selected or not, paths relative to the file, the
environment applied as its own step."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import msgspec
import pytest

from contracts import config
from contracts.config import ConfigError


def parse(text: str):
    return config.parse(tomllib.loads(text), "test.toml")


@pytest.mark.parametrize(
    "text, message",
    [
        ('[clustr]\nname = "x"', "[clustr]: unknown table; did you mean 'cluster'?"),
        ('[agnet]\nnode = "x"', "[agnet]: unknown table; did you mean 'agent'?"),
        ('[store]\npaht = "x"', "[store].paht: unknown key; did you mean 'path'?"),
        ('[cluster]\nnmae = "x"', "[cluster].nmae: unknown key; did you mean 'name'?"),
        ('[store.server]\nhots = "x"', "[store.server].hots: unknown key; did you mean 'host'?"),
        ("[transport.kafka]\nlinger = 5", "[transport.kafka].linger: unknown key; did you mean 'linger_ms'?"),
        (
            "[simulation]\nstragglers = 1.0",
            "[simulation].stragglers: unknown key; did you mean 'stragglers_per_hour'?",
        ),
        ("[agent.intervals]\ngpus = 1.0", "[agent.intervals].gpus: unknown key; did you mean 'gpu'?"),
        (
            "[gpu_types.H100]\nprice_per_gpu_hour = 1.0\nhas_gmp = true",
            "[gpu_types.H100].has_gmp: unknown key; did you mean 'has_gpm'?",
        ),
    ],
)
def test_typos_are_refused_naming_the_key_and_the_nearest_name(text, message):
    with pytest.raises(ConfigError, match="^test.toml: " + re.escape(message)):
        parse(text)


def test_a_pool_typo_names_the_pool():
    text = """
[gpu_types.H100]
price_per_gpu_hour = 2.0
[network_tiers.ib]
[[pools]]
name = "core"
class = "core"
gpu_type = "H100"
network_tier = "ib"
nodes = ["gpu-[1-2]"]
storage_ceiling_bytes_per_s = 1e9
gpus_per_nodes = 8
"""
    with pytest.raises(
        ConfigError, match=re.escape("[pools[0]].gpus_per_nodes: unknown key; did you mean 'gpus_per_node'?")
    ):
        parse(text)


@pytest.mark.parametrize(
    "text, message",
    [
        ('[teams]\nllm = "llm"', "[teams].llm: expected list, got str"),
        ("[teams]\ndefault_team = 3", "[teams].default_team: expected str, got int"),
        (
            "[gpu_types.H100]\nprice_per_gpu_hour = -1.0",
            "[gpu_types.H100].price_per_gpu_hour: expected float >= 0",
        ),
        ("[analyzer]\nwindow_s = 0", "[analyzer].window_s: expected int >= 1, got 0"),
        ("[analyzer]\nhealthy_quantile = 1.5", "[analyzer].healthy_quantile: expected float < 1"),
        ("[analyzer]\nwindow_s = 1.5", "[analyzer].window_s: expected int, got float"),
        ('[store]\nkind = "s3"', "[store].kind: invalid enum value 's3'; expected one of 'chdb', 'server'"),
        ("[store.server]\nport = 70000", "[store.server].port: expected int <= 65535, got 70000"),
        ("[simulation]\npartial_allocation_probability = 2.0", "[simulation].partial_allocation_probability"),
        ("[transport.kafka]\nmax_in_flight = 6", "[transport.kafka].max_in_flight must be 1..5"),
        (
            '[transport.kafka]\nsasl_password = "hunter2"',
            "[transport.kafka].sasl_password: secrets never live",
        ),
        ("schema_version = 2", "schema_version 2 is not supported"),
        ("cluster = 3", "[cluster]: expected a table, got int 3"),
    ],
)
def test_wrong_types_and_values_out_of_bounds_are_refused_by_name(text, message):
    with pytest.raises(ConfigError, match="^test.toml: " + re.escape(message)) as e:
        parse(text)
    assert "hunter2" not in str(e.value)


def test_unselected_tables_are_checked_too():
    """A typo in [store.server] or [transport.kafka] is an error on a chDB, in-process setup as well."""
    with pytest.raises(ConfigError, match=re.escape("[store.server].hots")):
        parse('[store]\nkind = "chdb"\n[store.server]\nhots = "ch1"')
    with pytest.raises(ConfigError, match=re.escape("[transport.kafka].bootstrp")):
        parse('[transport]\nkind = "inprocess"\n[transport.kafka]\nbootstrp = "k:9092"')


POOLS = """
[gpu_types.H100]
price_per_gpu_hour = 2.0
[network_tiers.ib]
[[pools]]
name = "a"
class = "core"
gpu_type = "{gpu}"
network_tier = "ib"
nodes = ["gpu-[1-2]"]
storage_ceiling_bytes_per_s = 1e9
[[pools]]
name = "b"
class = "{klass}"
gpu_type = "H100"
network_tier = "ib"
nodes = ["gpu-{second}"]
storage_ceiling_bytes_per_s = 1e9
"""


@pytest.mark.parametrize(
    "values, message",
    [
        ({"gpu": "B200"}, "[pools[0]].gpu_type: 'B200' is not declared under [gpu_types]"),
        ({"second": "2"}, "[pools[1]].nodes: node 'gpu-2' is already in pool 'a'"),
        (
            {"klass": "gold"},
            "[pools[1]].class: invalid enum value 'gold'; expected one of 'core', 'shared', 'experiment'",
        ),
    ],
)
def test_cross_table_checks(values, message):
    text = POOLS.format(**({"gpu": "H100", "klass": "shared", "second": "9"} | values))
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse(text)


def test_a_valid_file_parses_into_typed_values():
    cfg = parse(POOLS.format(gpu="H100", klass="shared", second="9"))
    assert cfg.pools[0].nodes == ("gpu-1", "gpu-2") and cfg.pools[1].pool_class == "shared"
    assert cfg.price(cfg.pools[0]) == 2.0 and isinstance(cfg.pools[0].storage_ceiling_bytes_per_s, float)
    assert cfg.team_of("nobody") == "unassigned"


def test_the_shipped_example_parses_and_states_the_documented_keys():
    cfg = config.load(None, env={})
    assert cfg.cluster.name == "demo-east" and len(cfg.pools) == 3
    assert cfg.teams.accounts["llm-pretrain"] == ("llm", "llm-pretrain") and cfg.team_of("asr") == "speech"
    assert cfg.store.server.password_env == "GOODPUT_CLICKHOUSE_PASSWORD"


def test_relative_paths_are_relative_to_the_config_file(tmp_path, monkeypatch):
    site = tmp_path / "other" / "dir"
    site.mkdir(parents=True)
    (site / "config.toml").write_text(
        '[store]\npath = "data"\n[agent]\nstate_dir = "state"\njob_file = "/abs/jobs.jsonl"\n'
        'lustre_roots = ["lustre"]\n[transport.kafka]\nssl_cafile = "../ca.pem"\n'
    )
    monkeypatch.chdir(tmp_path)
    cfg = config.load("other/dir/config.toml", env={})
    assert cfg.store.path == str(site / "data")
    assert cfg.agent.state_dir == str(site / "state") and cfg.agent.job_file == "/abs/jobs.jsonl"
    assert cfg.agent.lustre_roots == (str(site / "lustre"),)
    assert Path(cfg.transport.kafka.ssl_cafile).resolve() == tmp_path / "other" / "ca.pem"
    assert cfg.store.server.ca_certs == "", "an empty path stays empty: none"
    assert config.load(None, env={}).store.path == str(tmp_path / "goodput-data"), "the example: the cwd"


def test_the_environment_is_a_separate_step_after_the_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        '[store]\npath = "data"\n[agent]\nnode = "from-file"\n[transport.kafka]\nbootstrap = "f:1"\n'
    )
    parsed = config.parse(tomllib.loads(path.read_text()))
    assert parsed.store.path == "data", "parse alone reads no environment and resolves no path"
    env = {"GOODPUT_STORE_PATH": "/env/data", "GOODPUT_KAFKA_BOOTSTRAP": "e:1", "GOODPUT_NODE": "n7"}
    cfg = config.load(path, env=env)
    assert (cfg.store.path, cfg.transport.kafka.bootstrap, cfg.agent.node) == ("/env/data", "e:1", "n7")
    cfg = config.load(path, env={"GOODPUT_NODE": ""})
    assert (cfg.store.path, cfg.agent.node) == (str(tmp_path / "data"), "from-file"), "empty: not set"


def test_one_secret_helper_reads_the_named_variable_and_never_holds_it():
    assert config.secret("GP_TEST_SECRET", "[x].y_env", {"GP_TEST_SECRET": "s3cret"}) == "s3cret"
    with pytest.raises(ConfigError, match=re.escape("GP_TEST_SECRET (named by [x].y_env) is not set")):
        config.secret("GP_TEST_SECRET", "[x].y_env", {})
    cfg = parse('[store.server]\npassword_env = "GP_TEST_SECRET"')
    assert cfg.store.server.password({"GP_TEST_SECRET": "s3cret"}) == "s3cret"
    assert "s3cret" not in repr(cfg)


def test_values_spelt_out_in_the_model_agree_with_their_owners():
    """The model imports no collector, simulator or store; these copies must follow the originals."""
    from agents.sources import BUILDERS
    from collectors.diskstats import DEFAULT_EXCLUDE
    from collectors.lustre import DEFAULT_ROOTS
    from goodput.sim.cluster import SimConfig

    assert config.DISK_EXCLUDE == DEFAULT_EXCLUDE and config.LUSTRE_ROOTS == DEFAULT_ROOTS
    assert set(config.SOURCES) == set(BUILDERS)
    sim = SimConfig()
    assert msgspec.structs.asdict(config.SimulationConfig()) == {
        k: getattr(sim, k) for k in config.SimulationConfig.__struct_fields__
    }


def test_the_node_agent_reads_the_model_without_the_analytics_stack():
    import subprocess
    import sys

    heavy = "('numpy', 'pyarrow', 'polars')"
    code = f"import sys, contracts.config; print([m for m in {heavy} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_metrics_addresses_come_from_the_environment_and_a_bad_one_names_its_variable():
    cfg = config.load(
        None, {"GOODPUT_METRICS_ADDRESS": "10.1.2.3:9477", "GOODPUT_LOADER_METRICS_ADDRESS": ":9479"}
    )
    assert cfg.agent.metrics_address == "10.1.2.3:9477" and cfg.loader.metrics_endpoint == ("0.0.0.0", 9479)
    defaults = config.load(None, {})
    assert (
        defaults.agent.metrics_address == "0.0.0.0:9477" and defaults.loader.metrics_address == "0.0.0.0:9479"
    )
    with pytest.raises(
        ConfigError, match=r"GOODPUT_METRICS_ADDRESS \(overrides \[agent\]\.metrics_address\).*host:port"
    ):
        config.load(None, {"GOODPUT_METRICS_ADDRESS": "node-ip"})
