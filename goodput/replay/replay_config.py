"""The config a replay runs under: made from the trace (its nodes become pools), with a user's file laid
over it. Written beside the store, so the read commands (`goodput summary --config`) price the same."""

from __future__ import annotations

from pathlib import Path

from contracts import config as config_mod
from contracts.config import Config, ConfigError

PLACEHOLDER_TIER = {"unknown": {"link_gbps": 100.0, "links_per_node": 1, "link_layer": "Ethernet"}}
"""The traces say nothing of the fabric or of storage: a tier (and a storage ceiling, PLACEHOLDER_CEILING)
that the replays' figures never read, since the config requires one."""
PLACEHOLDER_CEILING = 1e12


def base(cluster: str, scheduler: str, gpu_types: dict, pools: list[dict], **tables: dict) -> dict:
    """TOML data for a replay: its cluster with the trace's job-state collector as control node, GPU types
    at a nominal price of 1 per GPU-hour unless given (the traces have no prices), the pools (on the
    placeholder tier), the store beside the file, and any other tables."""
    return {
        "schema_version": config_mod.CONFIG_VERSION,
        "cluster": {"name": cluster, "currency": "USD", "control_nodes": [scheduler]},
        "gpu_types": {m: {"price_per_gpu_hour": 1.0, "has_gpm": False, **t} for m, t in gpu_types.items()},
        "network_tiers": PLACEHOLDER_TIER,
        "pools": [
            {
                "class": "shared",
                "network_tier": "unknown",
                "storage_ceiling_bytes_per_s": PLACEHOLDER_CEILING,
                **p,
            }
            for p in pools
        ],
        "store": {"kind": "chdb", "path": "store"},
        **tables,
    }


def overlay(data: dict, path: str | None, scheduler: str) -> dict:
    """`data` with the TOML file at `path` laid over it: `[teams]` replaces the replay's mapping whole, a
    `[gpu_types.<T>]` is merged into the replay's type T, other tables key by key, and the trace's
    job-state collector stays a control node. `[[pools]]` is refused: a replay makes its pools from the
    trace."""
    if not path:
        return data
    user = config_mod.read_toml(path)[0]
    if "pools" in user:
        raise ConfigError(f"{path}: [[pools]]: a replay makes its pools from the trace; remove them")
    out = dict(data)
    for key, value in user.items():
        if key == "gpu_types":
            out[key] = {**out[key], **{t: {**out[key].get(t, {}), **v} for t, v in value.items()}}
        elif key != "teams" and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    control = list(out["cluster"].get("control_nodes", []))
    out["cluster"] = {**out["cluster"], "control_nodes": control + [scheduler] * (scheduler not in control)}
    return out


def parse(data: dict, path: str | None) -> Config:
    return config_mod.parse(data, path or "<replay>")


def write(data: dict, path: Path) -> None:
    import tomli_w

    path.write_bytes(tomli_w.dumps(data).encode())
