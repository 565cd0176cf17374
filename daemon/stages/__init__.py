"""The async loops, one per arrow of `watch -> log -> replay -> admit -> actuate`, written once for both worlds.

`ingest` appends what the Cluster observed; `admit` runs an admission cycle when the fold changed and appends its
decisions; `actuate` carries decisions out through the Cluster and appends each result. `recorder` is the one place
where events are appended and then folded. `ports` draws the two interfaces the loops need, a Cluster and a Clock:
`daemon.kube` is the real Cluster, `daemon.sim` a simulated one on a virtual clock. `runner` runs the loops either
concurrently (the daemon) or step by step in a fixed order (the simulator, deterministic).
"""
