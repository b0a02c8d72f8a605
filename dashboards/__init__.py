"""Grafana dashboards as code (grafanalib): the panels read the analyzers' tables and the live series by
the names in `contracts.catalog`; `goodput dashboards build` writes them with their provisioning."""
