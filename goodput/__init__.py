"""The `goodput` command and the demo: the top of the dependency graph, where agents, the simulated
fleet and the pipeline meet."""
