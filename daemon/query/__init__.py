"""Answers from the log: `admitd explain|history|queues|pending|replay`.

Pure-ish functions over a read-only `LogReader` and the fold (`daemon.domain.state`): the state at a moment is the
nearest snapshot at or before it plus the tail; a job's own events come from the log's subject index. Nothing here
writes, so every command is safe while a daemon appends to the same file.
"""
