"""The append-only SQLite event log: the only package that touches SQLite.

`store` (one writer with group commit, read-only readers), `codec` (canonical bytes, hash chain, upcasting),
`migrate` (schema versions), `replay` (snapshot + tail into state), `errors`.
"""

from daemon.eventlog.codec import StoredEvent
from daemon.eventlog.errors import EventLogError
from daemon.eventlog.replay import replay, save_snapshot
from daemon.eventlog.store import EventStore, LogReader, default_db_path

__all__ = ["EventLogError", "EventStore", "LogReader", "StoredEvent", "default_db_path", "replay", "save_snapshot"]
