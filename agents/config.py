"""The node agent's settings: the `[agent]` table of the goodput config file (contracts.config.AgentConfig)
with the node name settled.

The agent reads the same file as every other component (cluster name, Kafka settings and topic prefix
come from the same contracts.config.Config), so a typo anywhere in it stops the agent by name.

Precedence for the node name: `--node` flag > GOODPUT_NODE environment variable (the DaemonSet sets it
from the downward API's spec.nodeName; contracts.config.apply_env) > `[agent].node` > the host name.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import msgspec

from contracts.config import AgentConfig, Config, load


def agent_config(cfg: Config, node: str | None = None) -> AgentConfig:
    """`cfg.agent` (environment already applied) with the `--node` flag, else the host name, filled in."""
    return msgspec.structs.replace(cfg.agent, node=node or cfg.agent.node or socket.gethostname())


def load_agent(
    path: str | os.PathLike | None, node: str | None = None, env: Mapping[str, str] | None = None
) -> AgentConfig:
    """The agent's settings from the config file at `path` (the shipped example when None)."""
    return agent_config(load(path, env), node)
