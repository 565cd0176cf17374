"""`admitd simulate`: the same engine and event log, driven on a virtual clock from a YAML scenario."""
