"""The deployment files say what docs/agent.md says: checked against the agent's own config parser,
systemd's verifier and the manifest's structure, so a rename in one place cannot leave them behind."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from agents.config import agent_config
from contracts.config import AgentConfig, apply_env, parse, parse_address
from transport.kafka import KafkaSettings

DEPLOY = Path(__file__).resolve().parents[2] / "agents" / "deploy"


def _unit() -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(DEPLOY / "goodput-agent.service")
    return unit


def test_systemd_unit_passes_systemd_analyze_verify(tmp_path):
    verify = shutil.which("systemd-analyze")
    if verify is None:
        pytest.fail("systemd-analyze not found: install Debian's systemd package (.ci/install.sh does)")
    text = (DEPLOY / "goodput-agent.service").read_text()
    text = text.replace("/opt/goodput/.venv/bin/goodput", str(Path(sys.executable).with_name("goodput")))
    unit = tmp_path / "goodput-agent.service"
    unit.write_text(text)
    out = subprocess.run([verify, "verify", str(unit)], capture_output=True, text=True)
    assert out.returncode == 0 and "goodput-agent.service" not in out.stderr, out.stderr


def test_systemd_unit_gives_the_agent_time_to_flush_and_keeps_its_state():
    service = _unit()["Service"]
    assert float(service["TimeoutStopSec"]) > AgentConfig().shutdown_timeout_s + 5
    assert service["KillSignal"] == "SIGTERM" and service["Restart"] == "always"
    assert f"/var/lib/{service['StateDirectory']}" == AgentConfig().state_dir
    assert f"--state-dir {AgentConfig().state_dir}" in service["ExecStart"]


def test_daemonset_mounts_what_its_config_reads():
    config_map, daemonset = list(yaml.safe_load_all((DEPLOY / "daemonset.yaml").read_text()))
    toml = tomllib.loads(config_map["data"]["goodput.toml"])
    cfg = apply_env(parse(toml, "daemonset ConfigMap"), {"GOODPUT_NODE": "gpu-001"})
    agent = agent_config(cfg)
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True and spec["hostPID"] is True
    container = spec["containers"][0]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    for path, host in ((agent.sys_root, "/sys"), (agent.proc_root, "/proc")):
        assert mounts[path]["readOnly"] is True and volumes[mounts[path]["name"]]["hostPath"]["path"] == host
    assert all(any(root.startswith(m) for m in mounts) for root in agent.lustre_roots)
    state = mounts[agent.state_dir]
    assert "hostPath" in volumes[state["name"]] and not state.get("readOnly"), (
        "seqs and spool outlive the pod"
    )
    config_mount = mounts["/etc/goodput"]
    assert container["args"] == ["agent", "--config", "/etc/goodput/goodput.toml"]
    assert volumes[config_mount["name"]]["configMap"]["name"] == config_map["metadata"]["name"]
    env = {e["name"]: e.get("valueFrom", e.get("value")) for e in container["env"]}
    assert env["GOODPUT_NODE"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    kafka = KafkaSettings.from_config(cfg.transport.kafka)
    for var in (kafka.sasl_username_env, kafka.sasl_password_env):
        assert "secretKeyRef" in env[var], f"{var} named by the config must come from a Secret"
    port = parse_address(agent.metrics_address, "metrics_address")[1]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == port
    assert daemonset["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    assert ports["steps"] == parse_address(agent.step_address, "step_address")[1]
    assert spec["terminationGracePeriodSeconds"] > agent.shutdown_timeout_s + 5


def _expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of an env value from variables defined before it."""
    return re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], value)


def test_daemonset_runs_unprivileged_and_serves_metrics_on_the_node_ip_only():
    config_map, daemonset = list(yaml.safe_load_all((DEPLOY / "daemonset.yaml").read_text()))
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False, "the node agent never calls the Kubernetes API"
    container = spec["containers"][0]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] > 0 and sc["runAsGroup"] > 0
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostIPC" not in spec and "privileged" not in sc
    # the one root step: hands the state directory to that user, with CAP_CHOWN and nothing else
    (init,) = spec["initContainers"]
    isc = init["securityContext"]
    assert (
        isc["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
        and isc["allowPrivilegeEscalation"] is False
    )
    assert init["command"] == [
        "chown",
        "-R",
        f"{sc['runAsUser']}:{sc['runAsGroup']}",
        AgentConfig().state_dir,
    ]
    assert [m["mountPath"] for m in init["volumeMounts"]] == [AgentConfig().state_dir]
    # /metrics: the env override narrows the ConfigMap's 0.0.0.0 to the node's IP, same port
    env: dict[str, str] = {}
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = _expand(e["value"], env)
        elif e["valueFrom"].get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[e["name"]] = "10.1.2.3"
        elif e["valueFrom"].get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            env[e["name"]] = "gpu-001"
    toml = tomllib.loads(config_map["data"]["goodput.toml"])
    cfg = apply_env(parse(toml, "daemonset ConfigMap"), env)
    assert parse_address(cfg.agent.metrics_address, "metrics_address") == ("10.1.2.3", 9477)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == 9477


def test_systemd_unit_runs_as_its_own_user_without_capabilities():
    service = _unit()["Service"]
    assert service["DynamicUser"] == "yes" and "User" not in service
    assert service["CapabilityBoundingSet"] == "" and service["AmbientCapabilities"] == ""
    assert service["NoNewPrivileges"] == "yes" and service["ProtectSystem"] == "strict"
    # each of these closes the device cgroup to /dev/nvidia*: NVML would find no GPU
    assert not {"PrivateDevices", "DeviceAllow", "DevicePolicy", "ProtectClock"} & set(service)
    # the capabilities a few nodes need are documented as a drop-in, not granted here
    text = (DEPLOY / "goodput-agent.service").read_text()
    for cap in ("CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE"):
        assert (
            f"AmbientCapabilities={cap}" in text
            and cap in (DEPLOY.parents[1] / "docs" / "agent.md").read_text()
        )
