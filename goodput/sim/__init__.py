"""The simulated cluster behind `goodput demo`: a fleet of agents in one process."""
