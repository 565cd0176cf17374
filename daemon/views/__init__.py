"""The read wing: pure projections of the log (`projection`), each figure defined once (`queues`,
`kueue_counters`), fed live by the Recorder or from the log (`follow`). Exporters (`daemon.metrics`,
`daemon.kube.status`, `daemon.query`, `daemon.sim.report`) render them and keep no fold of their own."""
