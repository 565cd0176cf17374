-- Issue 10: historical snapshots, so that a past moment (`explain --at`, `queues --at`, `replay --at`) is folded
-- from a snapshot near it instead of from the first event.
--
-- Besides the newest 3, the writer keeps a snapshot for the log's lifetime (kept = 1) when the events appended
-- since the previous kept one (of the same state shape) hold at least as many payload bytes as the snapshot's body
-- (daemon/eventlog/store.py SNAPSHOT_KEEP_RATIO). So the kept snapshots together never take more room than the
-- events' payloads (plus the newest 3), and a moment is at most about one snapshot's worth of event bytes (and at
-- least one snapshot interval) after a kept snapshot: the fold from it costs about what decoding it costs.
-- Whether one is kept is decided when it is written and never changes (snapshots are never updated).
ALTER TABLE snapshots ADD COLUMN kept INTEGER NOT NULL DEFAULT 0;

DROP TRIGGER snapshots_keep_the_newest_three;

-- Nothing can delete one of the newest 3, nor a kept snapshot of the current shape (the newest snapshot's
-- state_version). Kept snapshots of an older shape are useless to every reader and may be pruned.
CREATE TRIGGER snapshots_keep_the_newest_three_and_the_kept BEFORE DELETE ON snapshots
WHEN OLD.seq >= (SELECT min(seq) FROM (SELECT seq FROM snapshots ORDER BY seq DESC LIMIT 3))
  OR (OLD.kept = 1 AND OLD.state_version = (SELECT state_version FROM snapshots ORDER BY seq DESC LIMIT 1))
BEGIN
    SELECT RAISE(ABORT, 'admitd: the newest 3 snapshots and the kept ones are kept; only others may be deleted');
END;
