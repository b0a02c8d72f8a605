"""Grafana's dashboard JSON schema (tests/dashboards/data/README.md), with three documented relaxations."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA_FILE = Path(__file__).parent / "data" / "dashboard.jsonschema.json"
ANY_OBJECT = {"type": "object", "additionalProperties": {}}


def load() -> dict:
    """The vendored schema, where three `_` (any value) fields of Grafana's CUE model, which the
    generator wrote as objects, accept what Grafana itself stores there: a field-override matcher's
    options (`byName` takes the field name, a string), an override property's value (`unit` takes a
    string) and a variable's query (a datasource plugin's query model, whose values are strings)."""
    schema = json.loads(SCHEMA_FILE.read_text())
    d = schema["definitions"]
    relax = [
        (d["MatcherConfig"]["properties"], "options"),
        (d["DynamicConfigValue"]["properties"], "value"),
    ]
    for props, key in relax:
        assert props[key] == ANY_OBJECT | {k: v for k, v in props[key].items() if k == "description"}, key
        props[key] = {}
    query = d["VariableModel"]["properties"]["query"]
    assert query["oneOf"][1]["additionalProperties"] == {"type": "object", "additionalProperties": {}}
    query["oneOf"][1] = ANY_OBJECT
    return schema
