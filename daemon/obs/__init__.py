"""Observability: structured logging and (later) every Prometheus metric, defined here and nowhere else."""
