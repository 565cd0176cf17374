"""Deterministic simulation testing: the daemon's real stages against the faulty simulated cluster, seed by seed
(`python -m tests.dst --seeds 1..10000`; issue 24)."""
